package testenv

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortGivesDistinctBindablePortsOutsideTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		port, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if port < testPortLow || port >= testPortHigh {
			t.Fatalf("port %d outside %d-%d", port, testPortLow, testPortHigh-1)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("the port handed out cannot be bound: %v", err)
		}
		_ = l.Close()
	}
}

func TestFreePortSkipsAPortInUse(t *testing.T) {
	// A port held by a listener FreePort knows nothing of (another process,
	// say) is proposed first: FreePort must find it in use and go on.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().(*net.TCPAddr).Port
	proposals := []int{busy, busy, 0}
	orig := pickPort
	defer func() { pickPort = orig }()
	pickPort = func() int {
		p := proposals[0]
		if len(proposals) > 1 {
			proposals = proposals[1:]
		}
		if p == 0 {
			return orig()
		}
		return p
	}
	port, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if port == busy {
		t.Fatalf("FreePort gave port %d, which a listener holds", busy)
	}
}

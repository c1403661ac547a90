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
	// Ports handed out and then bound (as a child process would) are never
	// given again, and the next one is bindable while they are held.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 20 {
		addr := FreeAddr(t, "127.0.0.1")
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	addr := FreeAddr(t, "127.0.0.1")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("FreeAddr gave %s, which is in use: %v", addr, err)
	}
	_ = l.Close()
}

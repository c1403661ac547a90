package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// ListenUDPAndTCP opens UDP and TCP listeners on one free 127.0.0.1 port, as a
// DNS server's address serves both. A port free for UDP may be held for TCP
// (by another listener or the local end of a connection), so it tries again
// with another port a few times.
func ListenUDPAndTCP(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			t.Cleanup(func() { _ = pc.Close(); _ = ln.Close() })
			return pc, ln
		}
		_ = pc.Close()
	}
	t.Fatal("no 127.0.0.1 port was free for both UDP and TCP in 20 tries")
	return nil, nil
}

// handedOut holds every port FreePort has returned in this process: two
// "free" addresses asked for one after the other (a member's peer and client
// address) must not be the same port.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Test ports come from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default) and below the
// NodePort range (30000-32767). A port the kernel hands out for listen(":0")
// is an ephemeral port, and so is the local end of every outgoing connection:
// between the moment such a port is found free and the moment a child process
// binds it, any connection made on the machine (the test's own clients, other
// test binaries run in parallel, kube-apiserver) can take it, and the bind
// fails with "address already in use" — which CI saw twice
// (TestARemovedMembersSidecarSetsItsDataAsideAndJoinsAgain,
// TestRestoreSQLiteSnapshotIntoANewCluster). Below that range only listeners
// that ask for a port by number compete, and each pick is random.
const (
	testPortLow  = 20000
	testPortHigh = 30000 // exclusive
)

// pickPort proposes a port to try; a variable so that a test can make it
// propose a port in use.
var pickPort = func() int { return testPortLow + rand.IntN(testPortHigh-testPortLow) }

// FreePort returns a port on host, outside the ephemeral and NodePort ranges,
// that was free a moment ago and that this process has not been given before.
// Another process may still bind it first; that shows up as a bind error, not
// a hang.
func FreePort(host string) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := pickPort()
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port on %s in %d-%d after 200 tries", host, testPortLow, testPortHigh-1)
}

// FreeAddr is FreePort as host:port, failing t when no port can be had.
func FreeAddr(t testing.TB, host string) string {
	t.Helper()
	port, err := FreePort(host)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

package testenv

import (
	"errors"
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

// handedOut holds every port FreePort has returned in this process. The
// kernel may give the same ephemeral port to two listen(":0") calls in a row
// once the first listener is closed, so two "free" addresses asked for one
// after the other (a member's peer and client address) can be the same port;
// the second bind then fails with "address already in use".
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a port on host that was free a moment ago and that this
// process has not been given before. Another process may still take it before
// the caller binds; that shows up as a bind error, not a hang.
func FreePort(host string) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("the kernel handed out only ports this process already holds in 100 tries")
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

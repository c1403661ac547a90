package testenv

import (
	"net"
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

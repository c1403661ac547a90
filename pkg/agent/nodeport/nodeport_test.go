package nodeport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestTargets(t *testing.T) {
	svc := func(typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
			{Name: "none", Port: 81, Protocol: corev1.ProtocolTCP},
		}}}
	}
	want := []Target{{NodePort: 30080, Backend: netip.MustParseAddrPort("10.96.1.2:80")}}
	for _, typ := range []corev1.ServiceType{corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer} {
		if diff := cmp.Diff(want, Targets(svc(typ), "10.96.1.2"), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("%s (-want +got):\n%s", typ, diff)
		}
	}
	if got := Targets(svc(corev1.ServiceTypeClusterIP), "10.96.1.2"); got != nil {
		t.Errorf("ClusterIP Service: %v, want none", got)
	}
	if got := Targets(svc(corev1.ServiceTypeNodePort), ""); got != nil {
		t.Errorf("no host address yet: %v, want none", got)
	}
}

// backend answers each line with its name and the line, like a pod behind a
// Service that says which it is.
func backend(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintf(c, "%s: %s\n", name, s.Text())
				}
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

func ask(port int32, line string) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return got, err
}

// waitIdle waits until r relays no connection: a client's close reaches the
// relay's goroutines a moment after the client has its answer.
func waitIdle(t *testing.T, r *Relay) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(r.slots) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still relayed", len(r.slots))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRelay(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	r := New(Config{Address: "127.0.0.1", MaxConns: 2})
	t.Cleanup(r.Close)
	port := freePort(t)

	if err := r.Set("shop/web", []Target{{NodePort: port, Backend: a}}); err != nil {
		t.Fatal(err)
	}
	if got, err := ask(port, "hello"); err != nil || got != "a: hello\n" {
		t.Fatalf("through the node port: %q, %v; want a's answer", got, err)
	}

	t.Run("a changed backend applies to the next connection", func(t *testing.T) {
		if err := r.Set("shop/web", []Target{{NodePort: port, Backend: b}}); err != nil {
			t.Fatal(err)
		}
		if got, err := ask(port, "again"); err != nil || got != "b: again\n" {
			t.Fatalf("%q, %v; want b's answer", got, err)
		}
	})

	t.Run("connections past the bound are closed, the bound ones served", func(t *testing.T) {
		waitIdle(t, r)
		var held []net.Conn
		defer func() {
			for _, h := range held {
				h.Close()
			}
		}()
		for range 2 {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			fmt.Fprintln(c, "hold")
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintln(c, "one too many")
		// Closed with the line unread: an end of file, or a reset.
		if n, err := c.Read(make([]byte, 16)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the third connection read %d bytes, %v; want it closed", n, err)
		}
		c.Close()
		for _, h := range held {
			h.Close()
		}
		held = nil
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := ask(port, "freed")
			if err == nil && got == "b: freed\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the held connections closed: %q, %v", got, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("a node port no Service has any more is closed", func(t *testing.T) {
		if err := r.Set("shop/web", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ask(port, "gone"); err == nil {
			t.Fatal("the node port still answers")
		}
	})

	t.Run("a port that cannot be opened is reported, the others served", func(t *testing.T) {
		waitIdle(t, r)
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		busy := int32(taken.Addr().(*net.TCPAddr).Port)
		other := freePort(t)
		err = r.Set("shop/two", []Target{{NodePort: busy, Backend: a}, {NodePort: other, Backend: a}})
		if err == nil {
			t.Fatal("no error for a port in use")
		}
		if got, err := ask(other, "still"); err != nil || got != "a: still\n" {
			t.Fatalf("the other port: %q, %v", got, err)
		}
		// Another Service is not told of that Service's port.
		if err := r.Set("shop/three", []Target{{NodePort: freePort(t), Backend: b}}); err != nil {
			t.Fatalf("another Service's Set: %v", err)
		}
		// Once the port is free, the next Set opens it.
		taken.Close()
		if err := r.Set("shop/three", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := ask(busy, "now"); err != nil || got != "a: now\n" {
			t.Fatalf("the freed port: %q, %v", got, err)
		}
	})
}

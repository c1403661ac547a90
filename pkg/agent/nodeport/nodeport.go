// Package nodeport serves the virtual cluster's node ports at the agent's own
// address, the InternalIP of the virtual cluster's node, as kube-proxy serves
// a Service's node port on every node: a connection to <node>:<nodePort> is
// relayed to the Service's host copy (its ClusterIP and port), where the
// host's proxy picks an endpoint.
//
// Nothing opens on a host node: the agent's address is a host pod's, which
// only the virtual cluster's own pods may reach (its NetworkPolicy), so a
// tenant's NodePort Service is served to the tenant's pods at the address
// Kubernetes clients expect, and exposed to no one else. TCP only; the relay
// dials nothing but the host copies' ClusterIPs the agent itself made.
package nodeport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// Target is one node port and where its connections go.
type Target struct {
	NodePort int32
	// Backend is the host copy's ClusterIP and the Service's port.
	Backend netip.AddrPort
}

// Targets are the TCP node ports of virtual Service v, relayed to its host
// copy's ClusterIP hostIP: none unless v is a NodePort or LoadBalancer Service
// and hostIP an address.
func Targets(v *corev1.Service, hostIP string) []Target {
	if v.Spec.Type != corev1.ServiceTypeNodePort && v.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	ip, err := netip.ParseAddr(hostIP)
	if err != nil {
		return nil
	}
	var out []Target
	for _, p := range v.Spec.Ports {
		if p.NodePort == 0 || (p.Protocol != "" && p.Protocol != corev1.ProtocolTCP) {
			continue
		}
		out = append(out, Target{NodePort: p.NodePort, Backend: netip.AddrPortFrom(ip, uint16(p.Port))})
	}
	return out
}

// Config is how a Relay listens and dials.
type Config struct {
	// Address is the address listeners bind, without port; empty for all of
	// the agent pod's addresses.
	Address string
	// MaxConns bounds the connections relayed at once over every node port,
	// so that a tenant's clients cannot take the agent's file descriptors
	// from its other work; past it new connections are closed. Default 1024.
	MaxConns int
	// DialTimeout bounds connecting to a backend. Default 5s.
	DialTimeout time.Duration
	// Logger logs listeners opened, closed and failing.
	Logger logr.Logger
}

// Relay holds a listener per node port in use. It is safe for concurrent use.
type Relay struct {
	cfg   Config
	slots chan struct{}

	mu        sync.Mutex
	byService map[string][]Target // service key → its targets
	listeners map[int32]*listener
}

type listener struct {
	ln      net.Listener
	backend netip.AddrPort // guarded by Relay.mu
}

// New makes a Relay with cfg's defaults filled in.
func New(cfg Config) *Relay {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	return &Relay{cfg: cfg, slots: make(chan struct{}, cfg.MaxConns), byService: map[string][]Target{}, listeners: map[int32]*listener{}}
}

// Set makes targets the node ports of the Service under key (none forgets
// it): listeners open for new node ports, close for ones no Service has any
// more, and a changed backend applies to the next connection. The error
// names the node ports of targets that could not be opened; every port not
// open is tried again on the next Set, of any Service.
func (r *Relay) Set(key string, targets []Target) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(targets) == 0 {
		delete(r.byService, key)
	} else {
		r.byService[key] = slices.Clone(targets)
	}
	want := map[int32]netip.AddrPort{}
	for _, ts := range r.byService {
		for _, t := range ts {
			want[t.NodePort] = t.Backend
		}
	}
	for port, l := range r.listeners {
		if _, ok := want[port]; !ok {
			_ = l.ln.Close()
			delete(r.listeners, port)
			r.cfg.Logger.V(1).Info("node port closed", "nodePort", port)
		}
	}
	failed := map[int32]error{}
	for port, backend := range want {
		if l, ok := r.listeners[port]; ok {
			l.backend = backend
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(r.cfg.Address, strconv.Itoa(int(port))))
		if err != nil {
			failed[port] = err
			continue
		}
		l := &listener{ln: ln, backend: backend}
		r.listeners[port] = l
		go r.serve(l)
		r.cfg.Logger.V(1).Info("node port open", "nodePort", port, "backend", backend.String())
	}
	// Only this Service's ports are its caller's to report.
	var errs []error
	for _, t := range targets {
		if err, ok := failed[t.NodePort]; ok {
			errs = append(errs, fmt.Errorf("node port %d: %w", t.NodePort, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes every listener; connections in flight end on their own.
func (r *Relay) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for port, l := range r.listeners {
		_ = l.ln.Close()
		delete(r.listeners, port)
	}
	r.byService = map[string][]Target{}
}

func (r *Relay) serve(l *listener) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond) // a transient accept error (EMFILE)
			continue
		}
		select {
		case r.slots <- struct{}{}:
		default:
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		backend := l.backend
		r.mu.Unlock()
		go func() {
			defer func() { <-r.slots }()
			r.relay(c, backend)
		}()
	}
}

// relay copies both ways until each side has closed its half.
func (r *Relay) relay(client net.Conn, backend netip.AddrPort) {
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.DialTimeout)
	defer cancel()
	upstream, err := (&net.Dialer{}).DialContext(ctx, "tcp", backend.String())
	if err != nil {
		r.cfg.Logger.V(1).Info("node port backend unreachable", "backend", backend.String(), "error", err.Error())
		return
	}
	defer upstream.Close()
	done := make(chan struct{})
	go func() {
		pipe(upstream, client)
		close(done)
	}()
	pipe(client, upstream)
	<-done
}

// pipe copies src to dst, then closes dst's write half so the peer sees EOF.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

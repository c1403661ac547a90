package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
)

// Config configures a Server.
type Config struct {
	// Domain is the virtual cluster's DNS domain. Default cluster.local.
	Domain string
	// HostDomain is the host cluster's DNS domain: its names are answered
	// NXDOMAIN, never forwarded, and an upstream reply naming anything in it
	// (or in Domain) is replaced by NXDOMAIN (Answer, Filter). Default
	// cluster.local.
	HostDomain string
	// Source answers questions about virtual Services.
	Source Source
	// Upstreams (host:port) receive every query Answer does not claim (names
	// outside both domains, reverse lookups included), tried in turn;
	// typically UpstreamsFromResolvConf("/etc/resolv.conf"), the agent pod's
	// own (host) DNS.
	Upstreams []string
	// Timeout bounds each attempt at one upstream. Default 2s.
	Timeout time.Duration
	// Logger receives upstream failures, at V(1): a host DNS outage would
	// otherwise log once per query.
	Logger logr.Logger
}

// Server answers DNS queries over UDP and TCP.
type Server struct {
	cfg   Config
	zones Zones
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Server, error) {
	if cfg.Source == nil || len(cfg.Upstreams) == 0 {
		return nil, errors.New("dnsserver: a source and at least one upstream are required")
	}
	if cfg.Domain == "" {
		cfg.Domain = "cluster.local"
	}
	if cfg.HostDomain == "" {
		cfg.HostDomain = "cluster.local"
	}
	for _, d := range []string{cfg.Domain, cfg.HostDomain} {
		if err := CheckDomain(d); err != nil {
			return nil, fmt.Errorf("dnsserver: %w", err)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	return &Server{cfg: cfg, zones: Zones{Domain: cfg.Domain, HostDomain: cfg.HostDomain}}, nil
}

// CheckDomain reports whether d can be a cluster domain: a domain name other
// than the root, which would make every name the cluster's and leave nothing
// to forward.
func CheckDomain(d string) error {
	if _, ok := dns.IsDomainName(d); !ok || dns.CanonicalName(d) == "." {
		return fmt.Errorf("%q is not a cluster domain", d)
	}
	return nil
}

// Serve answers queries arriving on pc (UDP) and ln (TCP) until ctx ends or
// one of them fails; either may be nil. When ctx ends it stops reading, lets
// the queries in flight finish (forwarding them is bounded by Timeout per
// upstream), closes both and returns nil.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	// Forwarding outlives ctx so that shutdown answers what it has accepted.
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) { s.handle(context.WithoutCancel(ctx), w, req) })
	var servers []*dns.Server
	if pc != nil {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: h, UDPSize: dns.DefaultMsgSize})
	}
	if ln != nil {
		servers = append(servers, &dns.Server{Listener: ln, Handler: h})
	}
	if len(servers) == 0 {
		return errors.New("dnsserver: nothing to serve on")
	}

	// Start one after the other, so that a failure to start stops only the
	// servers already running.
	done := make(chan error, len(servers))
	var running []*dns.Server
	stop := func() {
		// Bounded all the same: a hung shutdown would hang the agent.
		grace := s.cfg.Timeout*time.Duration(len(s.cfg.Upstreams)) + time.Second
		for _, srv := range running {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
			_ = srv.ShutdownContext(sctx) // errors only for a server already stopped, or on the bound
			cancel()
		}
	}
	for _, srv := range servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { done <- srv.ActivateAndServe() }()
		select {
		case <-started:
			running = append(running, srv)
		case err := <-done:
			stop()
			return fmt.Errorf("starting dns server: %w", err)
		}
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-done:
		err = fmt.Errorf("serving dns: %w", err)
	}
	stop()
	return err
}

// handle answers one query from the Source or forwards it, over the
// transport it came on, keeping from the tenant any upstream reply that names
// the zones (Filter), and truncates a UDP reply to the client's buffer (TC
// set, so the client asks again over TCP).
func (s *Server) handle(ctx context.Context, w dns.ResponseWriter, req *dns.Msg) {
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	resp, forward := Answer(s.zones, s.cfg.Source, req)
	if forward {
		resp = Filter(s.zones, req, s.forward(ctx, network, req))
	}

	size := dns.MaxMsgSize
	if network == "udp" {
		size = dns.MinMsgSize
	}
	if opt := req.IsEdns0(); opt != nil {
		if network == "udp" {
			size = max(int(opt.UDPSize()), dns.MinMsgSize)
		}
		if resp.IsEdns0() == nil {
			resp.SetEdns0(dns.DefaultMsgSize, false) // what the UDP server reads
		}
	}
	resp.Truncate(size)
	if err := w.WriteMsg(resp); err != nil {
		s.cfg.Logger.V(1).Info("writing dns reply", "error", err)
	}
}

// forward asks each upstream in turn and returns the first reply, whatever its
// code; SERVFAIL when none replies. The upstream sees a fresh random ID, so a
// client's predictable IDs do not make the agent's upstream traffic easier to
// spoof; the reply carries the client's ID again.
func (s *Server) forward(ctx context.Context, network string, req *dns.Msg) *dns.Msg {
	out := req.Copy()
	out.Id = dns.Id()
	// UDPSize sizes the read buffer for queries without EDNS; an oversized
	// reply is truncated for the client afterwards.
	c := &dns.Client{Net: network, Timeout: s.cfg.Timeout, UDPSize: dns.MaxMsgSize}
	for _, up := range s.cfg.Upstreams {
		resp, _, err := c.ExchangeContext(ctx, out, up)
		if err != nil {
			s.cfg.Logger.V(1).Info("dns upstream failed", "upstream", up, "network", network, "error", err)
			continue
		}
		resp.Id = req.Id
		return resp
	}
	s.cfg.Logger.V(1).Info("no dns upstream answered", "upstreams", s.cfg.Upstreams)
	fail := new(dns.Msg)
	fail.SetRcode(req, dns.RcodeServerFailure)
	fail.RecursionAvailable = true
	return fail
}

// UpstreamsFromResolvConf reads the nameservers of a resolv.conf(5) file as
// host:port addresses (port 53).
func UpstreamsFromResolvConf(path string) ([]string, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading resolv.conf: %w", err)
	}
	if len(cc.Servers) == 0 {
		return nil, fmt.Errorf("no nameserver in %s", path)
	}
	ups := make([]string, 0, len(cc.Servers))
	for _, ns := range cc.Servers {
		ups = append(ups, net.JoinHostPort(ns, cc.Port))
	}
	return ups, nil
}

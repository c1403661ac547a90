package kubeletapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// certificateRetry is the pause between attempts to obtain a serving
// certificate while the virtual cluster does not issue one.
const certificateRetry = 5 * time.Second

// Serve serves the kubelet API (container logs, and exec, attach and
// port-forward with Config.HostConfig) over TLS on ln until ctx ends. It first
// obtains a serving certificate from the virtual cluster, retrying until the
// cluster issues one; the certificate names the node and Config.NodeIPs, the
// addresses the virtual apiserver dials. It renews that certificate at
// RenewAt while it serves. It returns nil when ctx ends.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	log := logr.FromContextOrDiscard(ctx)
	handler, err := NewHandler(cfg)
	if err != nil {
		return err
	}
	cert := servingCertificate(ctx, cfg)
	if cert == nil {
		return nil // ctx ended
	}
	var current atomic.Pointer[tls.Certificate]
	current.Store(cert)
	go renewServingCertificate(ctx, cfg, &current)
	srv := &http.Server{
		Handler: handler,
		// Failed handshakes (scanners, clients without the cluster CA) are
		// routine; they go to the debug log, not to stderr.
		ErrorLog:          stdlog.New(logWriter{log.V(1)}, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			// The certificate is renewed while the server runs.
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil },
			// Verified by the handler against the virtual cluster's client CA,
			// which can change while the server runs.
			ClientAuth: tls.RequestClientCert,
			MinVersion: tls.VersionTLS12,
		},
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("serving the kubelet API", "address", ln.Addr().String())
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the kubelet API: %w", err)
	}
	return nil
}

// servingCertificate obtains a kubelet serving certificate from the virtual
// cluster of cfg.Virtual, retrying every few seconds until it is issued; nil
// when ctx ends first.
func servingCertificate(ctx context.Context, cfg Config) *tls.Certificate {
	log := logr.FromContextOrDiscard(ctx)
	for {
		if client := cfg.Virtual(); client != nil {
			attempt, cancel := context.WithTimeout(ctx, 2*time.Minute)
			cert, err := ServingCertificate(attempt, client, cfg.NodeName, cfg.NodeIPs)
			cancel()
			if err == nil {
				return cert
			}
			if ctx.Err() == nil {
				log.Info("no kubelet serving certificate yet; retrying", "error", err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(certificateRetry):
		}
	}
}

// renewServingCertificate replaces the served certificate at RenewAt of the
// current one, until ctx ends. Connections made before keep their
// certificate; new ones get the renewed one.
func renewServingCertificate(ctx context.Context, cfg Config, current *atomic.Pointer[tls.Certificate]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(RenewAt(current.Load().Leaf))):
		}
		cert := servingCertificate(ctx, cfg)
		if cert == nil {
			return
		}
		current.Store(cert)
		logr.FromContextOrDiscard(ctx).Info("kubelet serving certificate renewed", "notAfter", cert.Leaf.NotAfter)
	}
}

// logWriter turns the HTTP server's log lines into logr messages.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// SnapshotConfig says which member StreamSnapshot asks.
type SnapshotConfig struct {
	// Endpoint is the one member's client URL, by the DNS name its
	// certificate carries: a snapshot is the point-in-time state of the
	// member that sends it.
	Endpoint string
	// DialAddress, when set, is where the connection goes instead of
	// Endpoint's host (the sidecar reaches its own member on 127.0.0.1
	// without asking DNS); the certificate is still checked against
	// Endpoint's name.
	DialAddress string
	// TLS is the client configuration: the cluster CA, a client certificate.
	TLS *tls.Config
	// DialTimeout bounds connecting; default 5s.
	DialTimeout time.Duration
}

// StreamSnapshot copies one member's maintenance snapshot (etcd's own
// consistent snapshot of its backend, with the sha256 etcd appends) to w and
// returns the storage version the member reported. It keeps nothing on disk:
// the sidecar has no room it may fill for this.
func StreamSnapshot(ctx context.Context, cfg SnapshotConfig, w io.Writer) (string, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cfg.Endpoint},
		TLS:         cfg.TLS,
		DialTimeout: cfg.DialTimeout,
		DialOptions: DialTo(cfg.DialAddress),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return "", fmt.Errorf("connecting to etcd member %s: %w", cfg.Endpoint, err)
	}
	defer cli.Close()
	// A member that cannot be reached, or whose certificate is not for its
	// name, fails here within DialTimeout; the snapshot itself may take
	// long and is bounded by ctx alone.
	reach, cancel := context.WithTimeout(ctx, 2*cfg.DialTimeout)
	_, err = cli.Status(reach, cfg.Endpoint)
	cancel()
	if err != nil {
		return "", fmt.Errorf("reaching etcd member %s: %w", cfg.Endpoint, err)
	}
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("asking etcd member %s for a snapshot: %w", cfg.Endpoint, err)
	}
	defer resp.Snapshot.Close()
	if _, err := io.Copy(w, resp.Snapshot); err != nil {
		return resp.Version, fmt.Errorf("receiving the snapshot of etcd member %s: %w", cfg.Endpoint, err)
	}
	return resp.Version, nil
}

// DialTo is the gRPC option that sends every connection to address instead of
// the endpoint's host (TLS still checks the endpoint's name); none for "".
func DialTo(address string) []grpc.DialOption {
	if address == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", address)
	})}
}

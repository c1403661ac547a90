package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Servers of one HA cluster must share their CAs and service-account key, or a
// client (the published kubeconfig, a ServiceAccount token) that works against
// one server fails against the next behind the Service. k3s shares them as
// bootstrap data in the datastore; the stand-in does the same, in the clear
// (it is a test tool), under bootstrapKey: the first server to start stores its
// files, every later one replaces its own with the stored ones. Only HA
// clusters list more than one endpoint, so a single endpoint (kine, or one
// etcd member) skips sharing altogether.

const bootstrapKey = "/k3k-standin/bootstrap"

// bootstrapFiles are the files under <data-dir>/server/tls that must match on
// every server.
var bootstrapFiles = []string{"server-ca.crt", "server-ca.key", "client-ca.crt", "client-ca.key", "service.key"}

// shareBootstrap stores this server's bootstrap files unless another server
// did first, and then makes the local files equal to the stored ones. It
// retries until ctx ends: members may still be joining.
func shareBootstrap(ctx context.Context, cfg Config, certs tlsDir) error {
	var endpoints []string
	for _, ep := range strings.Split(cfg.DatastoreEndpoint, ",") {
		endpoints = append(endpoints, strings.TrimSpace(ep))
	}
	if len(endpoints) < 2 {
		return nil
	}
	local := map[string][]byte{}
	for _, f := range bootstrapFiles {
		data, err := os.ReadFile(certs.path(f))
		if err != nil {
			return fmt.Errorf("bootstrap data: %w", err)
		}
		local[f] = data
	}
	tlsCfg, err := datastoreTLS(cfg)
	if err != nil {
		return err
	}
	for {
		stored, err := putIfAbsent(ctx, endpoints, tlsCfg, local)
		if err == nil {
			for _, f := range bootstrapFiles {
				if !bytes.Equal(stored[f], local[f]) {
					if err := writeFileAtomic(certs.path(f), stored[f], 0o600); err != nil {
						return err
					}
				}
			}
			return nil
		}
		fmt.Fprintf(os.Stderr, "k3s stand-in: bootstrap data not shared yet: %v\n", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// datastoreTLS is the client TLS configuration k3s is given for the
// datastore; nil for plain http endpoints.
func datastoreTLS(cfg Config) (*tls.Config, error) {
	if cfg.DatastoreCAFile == "" && cfg.DatastoreCertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.DatastoreCAFile != "" {
		pem, err := os.ReadFile(cfg.DatastoreCAFile)
		if err != nil {
			return nil, fmt.Errorf("datastore-cafile: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		tc.RootCAs.AppendCertsFromPEM(pem)
	}
	if cfg.DatastoreCertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.DatastoreCertFile, cfg.DatastoreKeyFile)
		if err != nil {
			return nil, fmt.Errorf("datastore client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// putIfAbsent stores files under bootstrapKey unless the key exists, in one
// transaction, and returns what is stored afterwards (files, or an earlier
// server's).
func putIfAbsent(ctx context.Context, endpoints []string, tlsCfg *tls.Config, files map[string][]byte) (map[string][]byte, error) {
	value, err := json.Marshal(files)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(bootstrapKey), "=", 0)).
		Then(clientv3.OpPut(bootstrapKey, string(value))).
		Else(clientv3.OpGet(bootstrapKey)).
		Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return files, nil
	}
	if len(resp.Responses) != 1 || len(resp.Responses[0].GetResponseRange().GetKvs()) != 1 {
		return nil, errors.New(bootstrapKey + " exists but was not returned")
	}
	stored := map[string][]byte{}
	if err := json.Unmarshal(resp.Responses[0].GetResponseRange().GetKvs()[0].Value, &stored); err != nil {
		return nil, fmt.Errorf("stored bootstrap data: %w", err)
	}
	for _, f := range bootstrapFiles {
		if len(stored[f]) == 0 {
			return nil, fmt.Errorf("stored bootstrap data lacks %s", f)
		}
	}
	return stored, nil
}

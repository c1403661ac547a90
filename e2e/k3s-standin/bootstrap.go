package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Servers of one HA cluster must share their CAs and service-account key, or a
// client (the published kubeconfig, a ServiceAccount token) that works against
// one server fails against the next behind the Service. k3s shares them as
// bootstrap data in the datastore; the stand-in does the same, in the clear
// (it is a test tool), under bootstrapKey: the first server to start stores its
// files, every later one replaces its own with the stored ones.
//
// It speaks etcd's JSON gateway (/v3/kv/txn) with plain net/http, so the
// stand-in needs no etcd client library. Only etcd endpoints serve the gateway
// (kine does not), and only HA clusters list more than one endpoint, so a
// single endpoint skips sharing altogether.

const bootstrapKey = "/k3k-standin/bootstrap"

// bootstrapFiles are the files under <data-dir>/server/tls that must match on
// every server.
var bootstrapFiles = []string{"server-ca.crt", "server-ca.key", "client-ca.crt", "client-ca.key", "service.key"}

// shareBootstrap stores this server's bootstrap files unless another server
// did first, and then makes the local files equal to the stored ones. It
// retries until ctx ends: members may still be joining.
func shareBootstrap(ctx context.Context, cfg Config, certs tlsDir) error {
	endpoints := strings.Split(cfg.DatastoreEndpoint, ",")
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
	client, err := gatewayClient(cfg)
	if err != nil {
		return err
	}
	for {
		var errs []error
		for _, ep := range endpoints {
			stored, err := putIfAbsent(ctx, client, strings.TrimSpace(ep), local)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, f := range bootstrapFiles {
				if !bytes.Equal(stored[f], local[f]) {
					if err := writeFileAtomic(certs.path(f), stored[f], 0o600); err != nil {
						return err
					}
				}
			}
			return nil
		}
		fmt.Fprintf(os.Stderr, "k3s stand-in: bootstrap data not shared yet: %v\n", errors.Join(errs...))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func gatewayClient(cfg Config) (*http.Client, error) {
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
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// putIfAbsent stores files under bootstrapKey unless the key exists, and
// returns what is stored afterwards (files, or the earlier server's).
func putIfAbsent(ctx context.Context, client *http.Client, endpoint string, files map[string][]byte) (map[string][]byte, error) {
	value, err := json.Marshal(files)
	if err != nil {
		return nil, err
	}
	key := base64.StdEncoding.EncodeToString([]byte(bootstrapKey))
	body, err := json.Marshal(map[string]any{
		"compare": []map[string]any{{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}},
		"success": []map[string]any{{"request_put": map[string]any{"key": key, "value": base64.StdEncoding.EncodeToString(value)}}},
		"failure": []map[string]any{{"request_range": map[string]any{"key": key}}},
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v3/kv/txn", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", endpoint, resp.Status, bytes.TrimSpace(raw))
	}
	var answer struct {
		Succeeded bool `json:"succeeded"`
		Responses []struct {
			ResponseRange struct {
				Kvs []struct {
					Value []byte `json:"value"` // base64 in JSON, decoded by encoding/json
				} `json:"kvs"`
			} `json:"response_range"`
		} `json:"responses"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return nil, fmt.Errorf("%s: reading the txn answer: %w", endpoint, err)
	}
	if answer.Succeeded {
		return files, nil
	}
	if len(answer.Responses) != 1 || len(answer.Responses[0].ResponseRange.Kvs) != 1 {
		return nil, fmt.Errorf("%s: %s exists but was not returned", endpoint, bootstrapKey)
	}
	stored := map[string][]byte{}
	if err := json.Unmarshal(answer.Responses[0].ResponseRange.Kvs[0].Value, &stored); err != nil {
		return nil, fmt.Errorf("%s: stored bootstrap data: %w", endpoint, err)
	}
	for _, f := range bootstrapFiles {
		if len(stored[f]) == 0 {
			return nil, fmt.Errorf("%s: stored bootstrap data lacks %s", endpoint, f)
		}
	}
	return stored, nil
}

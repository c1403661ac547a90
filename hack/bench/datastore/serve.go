package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/k3s-io/kine/pkg/drivers/generic"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/endpoint"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/k3k-io/k3k/pkg/datastore/etcd/member"
)

// serveKine runs kine the way its own binary does with no flags: the stock
// SQLite DSN and the binary's defaults, only the file and address are ours.
// controlAddr serves its metrics and CPU profiles to the bench (serveControl).
func serveKine(dir, addr, controlAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	wg := &sync.WaitGroup{}
	reg := prometheus.NewRegistry()
	_, err := endpoint.Listen(ctx, endpoint.Config{
		MetricsRegisterer:    reg,
		WaitGroup:            wg,
		Listener:             addr,
		Endpoint:             "sqlite://" + filepath.Join(dir, "state.db") + "?" + kinesqlite.DefaultParams,
		ConnectionPoolConfig: generic.ConnectionPoolConfig{MaxIdle: 20, MaxIdleTime: 2 * time.Minute},
		NotifyInterval:       5 * time.Second,
		EmulatedETCDVersion:  "3.6.11",
		CompactTimeout:       5 * time.Second,
		CompactMinRetain:     1000,
		CompactBatchSize:     1000,
		PollBatchSize:        500,
		PollInterval:         time.Second,
	})
	if err != nil {
		return err
	}
	if err := serveControl(controlAddr, reg); err != nil {
		return err
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// serveEtcd runs one etcd member with embed's defaults (fsync on). With
// checkEvery > 0 it turns on the corruption checks the datastore sidecar's
// members run (member.EnableCorruptionChecks), the periodic one every checkEvery
// so that hash passes happen during a short run.
func serveEtcd(dir, addr string, checkEvery time.Duration) error {
	cfg := embed.NewConfig()
	if checkEvery > 0 {
		if err := member.EnableCorruptionChecks(cfg, checkEvery); err != nil {
			return err
		}
	}
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	client, _ := url.Parse("http://" + addr)
	peer, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return fmt.Errorf("etcd not ready")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-e.Err():
		return err
	}
	return nil
}

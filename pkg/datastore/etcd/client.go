package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// ClientConfig configures NewClient.
type ClientConfig struct {
	// TLS is the client TLS configuration: the cluster's CA as RootCAs and a
	// client certificate signed by it.
	TLS *tls.Config
	// DialTimeout bounds connecting to one member; default 3s.
	DialTimeout time.Duration
	// CallTimeout bounds each read (Status, MemberList, AlarmList); default 3s.
	CallTimeout time.Duration
	// Logger is the etcd client's logger; default: none.
	Logger *zap.Logger
	// DialContext, when set, opens the connections instead of the system's
	// resolver and dialer. TLS still verifies the endpoint's host name, so a
	// test can point the members' DNS names at loopback addresses without
	// weakening what is checked.
	DialContext func(ctx context.Context, addr string) (net.Conn, error)
}

// EtcdClient is the real Client: one etcd v3 client per member endpoint,
// created on first use and kept until Close.
type EtcdClient struct {
	cfg     ClientConfig
	mu      sync.Mutex
	clients map[string]*clientv3.Client
}

var _ Client = (*EtcdClient)(nil)

// NewClient returns a Client that talks to members with cfg.
func NewClient(cfg ClientConfig) *EtcdClient {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &EtcdClient{cfg: cfg, clients: map[string]*clientv3.Client{}}
}

// Close closes every connection.
func (c *EtcdClient) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for ep, cl := range c.clients {
		errs = append(errs, cl.Close())
		delete(c.clients, ep)
	}
	return errors.Join(errs...)
}

func (c *EtcdClient) client(endpoint string) (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[endpoint]; ok {
		return cl, nil
	}
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:            []string{endpoint},
		TLS:                  c.cfg.TLS,
		DialTimeout:          c.cfg.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               c.cfg.Logger,
		DialOptions:          dialOptions(c.cfg),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	c.clients[endpoint] = cl
	return cl, nil
}

func dialOptions(cfg ClientConfig) []grpc.DialOption {
	if cfg.DialContext == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithContextDialer(cfg.DialContext)}
}

// Status implements Reader.
func (c *EtcdClient) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	cl, err := c.client(endpoint)
	if err != nil {
		return MemberStatus{}, err
	}
	r, err := cl.Status(ctx, endpoint)
	if err != nil {
		return MemberStatus{}, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	return MemberStatus{
		MemberID: r.Header.MemberId, Leader: r.Leader, IsLearner: r.IsLearner,
		RaftTerm: r.RaftTerm, RaftIndex: r.RaftIndex, RaftAppliedIndex: r.RaftAppliedIndex, Revision: r.Header.Revision,
		DBSize: r.DbSize, DBSizeInUse: r.DbSizeInUse, DBSizeQuota: r.DbSizeQuota,
	}, nil
}

// MemberList implements Reader.
func (c *EtcdClient) MemberList(ctx context.Context, endpoint string, linearizable bool) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	cl, err := c.client(endpoint)
	if err != nil {
		return nil, err
	}
	var opts []clientv3.OpOption
	if !linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	r, err := cl.MemberList(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("listing members via %s: %w", endpoint, err)
	}
	out := make([]Member, 0, len(r.Members))
	for _, m := range r.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: slices.Clone(m.PeerURLs), ClientURLs: slices.Clone(m.ClientURLs), IsLearner: m.IsLearner})
	}
	return out, nil
}

// AlarmList implements Reader.
func (c *EtcdClient) AlarmList(ctx context.Context, endpoint string) ([]Alarm, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	cl, err := c.client(endpoint)
	if err != nil {
		return nil, err
	}
	r, err := cl.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing alarms via %s: %w", endpoint, err)
	}
	var out []Alarm
	for _, a := range r.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NONE {
			continue
		}
		out = append(out, Alarm{MemberID: a.MemberID, Type: AlarmType(a.Alarm.String())})
	}
	return out, nil
}

// AddLearner implements Client.
func (c *EtcdClient) AddLearner(ctx context.Context, endpoint, peerURL string) error {
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.MemberAddAsLearner(ctx, []string{peerURL})
		return err
	})
}

// Promote implements Client.
func (c *EtcdClient) Promote(ctx context.Context, endpoint string, id uint64) error {
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.MemberPromote(ctx, id)
		return err
	})
}

// Remove implements Client.
func (c *EtcdClient) Remove(ctx context.Context, endpoint string, id uint64) error {
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.MemberRemove(ctx, id)
		return err
	})
}

// UpdatePeerURLs implements Client.
func (c *EtcdClient) UpdatePeerURLs(ctx context.Context, endpoint string, id uint64, peerURLs []string) error {
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.MemberUpdate(ctx, id, peerURLs)
		return err
	})
}

// MoveLeader implements Client; etcd accepts it only at the leader.
func (c *EtcdClient) MoveLeader(ctx context.Context, leaderEndpoint string, to uint64) error {
	return c.do(leaderEndpoint, func(cl *clientv3.Client) error {
		_, err := cl.MoveLeader(ctx, to)
		return err
	})
}

// Compact implements Client. It waits for the compaction to be applied
// (physical), so that the following defragmentation finds the space free.
func (c *EtcdClient) Compact(ctx context.Context, endpoint string, rev int64) error {
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.Compact(ctx, rev, clientv3.WithCompactPhysical())
		return err
	})
}

// Defragment implements Client.
func (c *EtcdClient) Defragment(ctx context.Context, endpoint string) error {
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.Defragment(ctx, endpoint)
		return err
	})
}

// Disarm implements Client.
func (c *EtcdClient) Disarm(ctx context.Context, endpoint string, a Alarm) error {
	t, ok := etcdserverpb.AlarmType_value[string(a.Type)]
	if !ok {
		return fmt.Errorf("unknown alarm %q", a.Type)
	}
	return c.do(endpoint, func(cl *clientv3.Client) error {
		_, err := cl.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: etcdserverpb.AlarmType(t)})
		return err
	})
}

func (c *EtcdClient) do(endpoint string, call func(*clientv3.Client) error) error {
	cl, err := c.client(endpoint)
	if err != nil {
		return err
	}
	return translate(call(cl))
}

// translate maps etcd's answers that mean "already done" or "not yet" to this
// package's errors, keeping etcd's text for the log.
func translate(err error) error {
	if err == nil {
		return nil
	}
	for etcdErr, ours := range map[error]error{
		rpctypes.ErrMemberNotFound:        ErrMemberNotFound,
		rpctypes.ErrPeerURLExist:          ErrPeerURLExists,
		rpctypes.ErrMemberNotLearner:      ErrNotLearner,
		rpctypes.ErrMemberLearnerNotReady: ErrLearnerNotReady,
		rpctypes.ErrCompacted:             ErrCompacted,
		rpctypes.ErrUnhealthy:             ErrUnhealthy,
	} {
		if errors.Is(err, etcdErr) || strings.HasSuffix(err.Error(), rpctypes.ErrorDesc(etcdErr)) {
			return fmt.Errorf("%w: %v", ours, err)
		}
	}
	return err
}

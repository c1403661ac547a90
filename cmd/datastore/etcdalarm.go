package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
)

type etcdAlarmOptions struct {
	endpoint, serverName      string
	caFile, certFile, keyFile string
	timeout                   time.Duration
}

// newEtcdAlarmCommand is `datastore etcd-alarm`: the alarms of an HA
// cluster's etcd listed and disarmed from inside a server pod, since no image
// ships etcdctl. It talks to the pod's own member with the member
// certificate the pod mounts.
func newEtcdAlarmCommand() *cobra.Command {
	var o etcdAlarmOptions
	cmd := &cobra.Command{
		Use:   "etcd-alarm list | disarm ALARM MEMBER-ID",
		Short: "List or disarm the etcd alarms of an HA virtual cluster (run in a server pod's datastore container)",
		Long: `List or disarm etcd's alarms through the pod's own member, with the member
certificate the pod mounts:

  kubectl exec -n NS POD -c datastore -- /usr/local/bin/datastore etcd-alarm list
  kubectl exec -n NS POD -c datastore -- /usr/local/bin/datastore etcd-alarm disarm CORRUPT 8e9e05c52164694d

ALARM is NOSPACE or CORRUPT; MEMBER-ID is the hexadecimal ID "list" prints (0 for
a cluster-wide alarm). See docs/etcd.md for when to disarm what.`,
	}
	f := cmd.PersistentFlags()
	// The defaults are where the server pod has them, so that `kubectl exec`
	// needs no flag.
	f.StringVar(&o.endpoint, "endpoint", fmt.Sprintf("https://127.0.0.1:%d", layout.DatastoreClientPort), "client URL of the member to ask")
	f.StringVar(&o.serverName, "server-name", "", "name the member's certificate is checked against (empty: the first DNS name of --cert-file, which the members share)")
	f.StringVar(&o.caFile, "ca-file", layout.EtcdCAPath, "cluster CA certificate")
	f.StringVar(&o.certFile, "cert-file", layout.EtcdCertPath, "member certificate (client usage)")
	f.StringVar(&o.keyFile, "key-file", layout.EtcdKeyPath, "member key")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound of the whole command")
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "Print the members and the alarms raised",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEtcdAlarm(cmd.Context(), o, nil, cmd.OutOrStdout())
		},
	}, &cobra.Command{
		Use:   "disarm ALARM MEMBER-ID",
		Short: "Disarm one alarm of one member (0: the cluster-wide one), then print what is left",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t := etcd.AlarmType(strings.ToUpper(args[0]))
			if t != etcd.AlarmNoSpace && t != etcd.AlarmCorrupt {
				return fmt.Errorf("alarm %q: want %s or %s", args[0], etcd.AlarmNoSpace, etcd.AlarmCorrupt)
			}
			id, err := etcd.ParseID(args[1])
			if err != nil {
				return fmt.Errorf("member ID %q: want the hexadecimal ID that list prints: %w", args[1], err)
			}
			return runEtcdAlarm(cmd.Context(), o, &etcd.Alarm{MemberID: id, Type: t}, cmd.OutOrStdout())
		},
	})
	return cmd
}

// runEtcdAlarm disarms one alarm when disarm is set, then prints the members
// and the alarms raised.
func runEtcdAlarm(ctx context.Context, o etcdAlarmOptions, disarm *etcd.Alarm, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tlsCfg, err := alarmTLS(o)
	if err != nil {
		return err
	}
	u, err := url.Parse(o.endpoint)
	if err != nil || u.Port() == "" {
		return fmt.Errorf("--endpoint %q: want https://HOST:PORT", o.endpoint)
	}
	// gRPC checks the member's certificate against the host of the URL it
	// dials, and the certificate names no address: the URL names the
	// certificate's host, the dialer goes to --endpoint's address.
	endpoint := "https://" + net.JoinHostPort(tlsCfg.ServerName, u.Port())
	cl := etcd.NewClient(etcd.ClientConfig{TLS: tlsCfg, DialTimeout: o.timeout, CallTimeout: o.timeout,
		DialContext: func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
		}})
	defer cl.Close()
	members, err := cl.MemberList(ctx, endpoint, true)
	if err != nil {
		return fmt.Errorf("listing the members via %s (without quorum nothing can be disarmed): %w", o.endpoint, err)
	}
	if disarm != nil {
		if err := cl.Disarm(ctx, endpoint, *disarm); err != nil {
			return fmt.Errorf("disarming %s of member %s: %w", disarm.Type, etcd.FormatID(disarm.MemberID), err)
		}
		fmt.Fprintf(out, "disarmed %s of member %s\n", disarm.Type, etcd.FormatID(disarm.MemberID))
	}
	alarms, err := cl.AlarmList(ctx, endpoint)
	if err != nil {
		return err
	}
	names := map[uint64]string{}
	fmt.Fprintln(out, "members:")
	for _, m := range members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		name := m.Name
		if name == "" {
			name = "(not started)"
		}
		names[m.ID] = name
		fmt.Fprintf(out, "  %s %s %s\n", etcd.FormatID(m.ID), name, role)
	}
	if len(alarms) == 0 {
		fmt.Fprintln(out, "alarms: none")
		return nil
	}
	fmt.Fprintln(out, "alarms:")
	for _, a := range alarms {
		whose, ok := names[a.MemberID]
		switch {
		case a.MemberID == 0:
			whose = "the whole cluster"
		case !ok:
			whose = "no longer a member"
		}
		fmt.Fprintf(out, "  %s %s (%s)\n", a.Type, etcd.FormatID(a.MemberID), whose)
	}
	return nil
}

// alarmTLS is the member certificate as a client certificate
// (loadClientTLS), the server checked against the first DNS name of that
// certificate unless --server-name says otherwise: every member's certificate
// carries the same names, and none carries 127.0.0.1.
func alarmTLS(o etcdAlarmOptions) (*tls.Config, error) {
	cfg, err := loadClientTLS(o.caFile, o.certFile, o.keyFile)
	if err != nil {
		return nil, err
	}
	cfg.ServerName = o.serverName
	if cfg.ServerName == "" {
		// tls.LoadX509KeyPair has parsed the certificate already.
		if leaf := cfg.Certificates[0].Leaf; leaf != nil && len(leaf.DNSNames) > 0 {
			cfg.ServerName = leaf.DNSNames[0]
		} else {
			return nil, errors.New("--cert-file names no DNS name: give --server-name")
		}
	}
	return cfg, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/internal/hostclient"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/publisher"
)

type publishOptions struct {
	kubeconfigPath  string
	serverURL       string
	tlsServerName   string
	namespace       string
	secretName      string
	tokenPath       string
	tokenSecretName string
	healthAddress   string
	clientConfig    string
	resync          time.Duration
	identity        string
}

// newPublishKubeconfigCommand builds `datastore publish-kubeconfig`, the server
// pod's kubeconfig-publisher container.
func newPublishKubeconfigCommand() *cobra.Command {
	var o publishOptions
	cmd := &cobra.Command{
		Use:   "publish-kubeconfig --kubeconfig-path FILE --server-url URL --namespace NS --secret-name NAME",
		Short: "Publish the kubeconfig k3s writes into the cluster's Secret",
		Long: `Watch the admin kubeconfig k3s writes (--write-kubeconfig), and whenever it holds
valid credentials that differ from the Secret's, store it in the Secret's key
"kubeconfig.yaml" with its server rewritten to --server-url.

With --token-path, also restore the token Secret's key "token" from the server's
own token file when the Secret has lost its value.

The publisher only gets and updates the two Secrets, which the controller creates;
it never creates one. It talks to the host cluster with the pod's ServiceAccount,
or with --kubeconfig when run outside a pod. /healthz on --health-address answers
200 while the publish loop runs.

Nothing is published before the API server that k3s's kubeconfig names answers
/readyz ok through that kubeconfig's credentials. /readyz on --health-address
asks the same question on every request (200 "ok", else 503 with the reason): it
is the k3s container's readiness probe, since k3s refuses anonymous requests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPublish(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfigPath, "kubeconfig-path", "", "file k3s writes with --write-kubeconfig (required)")
	f.StringVar(&o.serverURL, "server-url", "", "https URL of the cluster's Service to put in the published kubeconfig (required)")
	f.StringVar(&o.tlsServerName, "tls-server-name", "", "name to verify the server certificate against, when the --server-url host is not among its names")
	f.StringVar(&o.namespace, "namespace", "", "namespace of the Secrets (required)")
	f.StringVar(&o.secretName, "secret-name", "", "Secret to publish the kubeconfig in (required)")
	f.StringVar(&o.tokenPath, "token-path", "", "the server's token file (<data-dir>/server/token); empty disables token restoring")
	f.StringVar(&o.tokenSecretName, "token-secret-name", "", "Secret holding the cluster token, restored from --token-path when empty")
	f.StringVar(&o.healthAddress, "health-address", fmt.Sprintf(":%d", layout.PublisherHealthPort), "host:port for /healthz (the publisher's liveness) and /readyz (the server API's readiness)")
	f.StringVar(&o.clientConfig, "kubeconfig", "", "kubeconfig for the host cluster; default: the pod's ServiceAccount")
	f.DurationVar(&o.resync, "resync", 30*time.Second, "how often to check the Secrets without a change on disk")
	f.StringVar(&o.identity, "identity", os.Getenv("POD_NAME"),
		"this publisher's name, recorded on the Secret; with several servers a Secret another server published stays while it is as good as ours (default $POD_NAME)")
	for _, name := range []string{"kubeconfig-path", "server-url", "namespace", "secret-name"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func runPublish(ctx context.Context, o publishOptions, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log := newLogger(stderr)
	ctx = logr.NewContext(ctx, log)
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()

	restConfig, err := hostConfig(o.clientConfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("building host cluster client: %w", err)
	}
	p, err := publisher.New(publisher.Config{
		KubeconfigPath:  o.kubeconfigPath,
		Endpoint:        kubeconfig.Endpoint{URL: o.serverURL, TLSServerName: o.tlsServerName},
		Secrets:         client.CoreV1().Secrets(o.namespace),
		SecretName:      o.secretName,
		TokenPath:       o.tokenPath,
		TokenSecretName: o.tokenSecretName,
		Resync:          o.resync,
		Identity:        o.identity,
	})
	if err != nil {
		return err
	}
	healthLn, err := net.Listen("tcp", o.healthAddress)
	if err != nil {
		return fmt.Errorf("--health-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", p.HealthHandler())
	mux.Handle("GET /readyz", p.ReadyHandler())
	health := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := health.Serve(healthLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "health server stopped")
		}
	}()
	log.Info("publishing kubeconfig", "path", o.kubeconfigPath, "namespace", o.namespace,
		"secret", o.secretName, "server", o.serverURL, "tokenSecret", o.tokenSecretName,
		"healthAddress", healthLn.Addr().String())

	runErr := p.Run(ctx)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = health.Shutdown(shutdownCtx)
	return runErr
}

// hostConfig is the client configuration for the host cluster: the pod's
// ServiceAccount in a pod, or the kubeconfig file given for tests and debugging.
func hostConfig(path string) (*rest.Config, error) {
	cfg, err := hostclient.Config(path)
	if err != nil {
		return nil, err
	}
	// A hung request must fail and be retried, not stall the publish loop.
	cfg.Timeout = 15 * time.Second
	cfg.UserAgent = "k3k-kubeconfig-publisher"
	return cfg, nil
}

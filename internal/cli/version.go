package cli

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Version is k3kcli's release version, set at build time with
// -ldflags "-X github.com/k3k-io/k3k/internal/cli.Version=v1.2.3"; without it
// the module version and VCS revision Go recorded in the binary are shown.
var Version = ""

// clientVersion describes this binary.
func clientVersion() string {
	info, ok := debug.ReadBuildInfo()
	v := Version
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if !ok {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " (commit " + rev + modified + ")"
	}
	return v + ", " + info.GoVersion
}

func newVersionCommand(o Options, g *globalFlags) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the versions of k3kcli and of the k3k controller in the host cluster",
		Long: `Show k3kcli's version and the k3k controller's: the Deployments labelled
app.kubernetes.io/part-of=k3k, app.kubernetes.io/component=controller (as the chart
labels them) in any namespace, with the version label and the image they run.
--client shows k3kcli's alone, without asking the host cluster.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(o.Out, "client: %s\n", clientVersion())
			if clientOnly {
				return nil
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			lines, err := controllerVersions(cmd.Context(), s)
			if err != nil {
				// The client's version is printed; the controller's is
				// unknown, which is worth saying but not failing over.
				fmt.Fprintf(o.Out, "controller: unknown (%s)\n", strings.TrimPrefix(FormatError(err), "error: "))
				return nil
			}
			for _, l := range lines {
				fmt.Fprintf(o.Out, "controller: %s\n", l)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "show k3kcli's version only")
	return cmd
}

// controllerVersions describes each k3k controller Deployment of the host.
func controllerVersions(ctx context.Context, s *session) ([]string, error) {
	list := &appsv1.DeploymentList{}
	if err := s.client.List(ctx, list, client.MatchingLabels{"app.kubernetes.io/part-of": "k3k", "app.kubernetes.io/component": "controller"}); err != nil {
		return nil, apiErr(err, "listing the k3k controller Deployments")
	}
	if len(list.Items) == 0 {
		return []string{"not found (no Deployment labelled app.kubernetes.io/part-of=k3k, app.kubernetes.io/component=controller; install it with helm install k3k charts/k3k -n k3k-system --create-namespace)"}, nil
	}
	var out []string
	for _, d := range list.Items {
		v := d.Labels["app.kubernetes.io/version"]
		if v == "" {
			v = "(no version label)"
		}
		var images []string
		for _, c := range d.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
		out = append(out, fmt.Sprintf("%s in %s/%s, image %s, %d/%d ready", v, d.Namespace, d.Name, strings.Join(images, ","), d.Status.ReadyReplicas, d.Status.Replicas))
	}
	return out, nil
}

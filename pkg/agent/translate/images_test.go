package translate

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestRegistryAddress(t *testing.T) {
	cases := []struct {
		image   string
		address bool
	}{
		{"busybox", false},
		{"library/busybox:1.37", false},
		{"k3k-io/k3k-datastore:dev", false},
		{"docker.io/library/busybox", false},
		{"registry.example.com:5000/team/app@sha256:" + strings.Repeat("a", 64), false},
		{"hostcluster.local/toolbox:v1", false},
		{"127.0.0.1:10250/x", true},
		{"127.0.0.1/x", true},
		{"10.96.0.1:443/x:v1", true},
		{"[::1]:2379/x", true},
		{"[fd00::1]/x", true},
		{"localhost/x", true},
		{"LOCALHOST:6443/x", true},
		{"localhost.:6443/x", true},
		{"api.localhost:8080/x", true},
		// One label with a port: the node resolves it through /etc/hosts or
		// its search domains (its own hostname, kubernetes.default…).
		{"node-1:10250/x", true},
		{"kubernetes:443/x", true},
		// Short and hex IPv4 spellings a C resolver (inet_aton) accepts; no
		// top-level domain is a number.
		{"127.1:10250/x", true},
		{"10.1.1/x", true},
		{"0x7f.1/x", true},
		{"registry.0x7f.example.com/x", false},
		{"cr.example.io/x", false},
	}
	for _, tc := range cases {
		host, got := registryAddress(tc.image)
		if got != tc.address {
			t.Errorf("registryAddress(%q) = %q, %v; want %v", tc.image, host, got, tc.address)
		}
	}
}

// TestRegistryAddressPatternAgrees holds the agent guard's regular
// expression to the agent's own reading of images: on every string of up to
// five pieces of an alphabet of what the reading looks at (brackets, colons,
// dots, slashes, hex and decimal numbers, localhost, in both cases), the two
// agree.
func TestRegistryAddressPatternAgrees(t *testing.T) {
	re := regexp.MustCompile(RegistryAddressPattern)
	pieces := []string{"a", "1", "0x", "0X", "f", ".", ":", "[", "]", "/", "localhost", "LocalHost"}
	checked, wrong := 0, 0
	var walk func(image string, left int)
	walk = func(image string, left int) {
		checked++
		_, want := registryAddress(image)
		if got := re.MatchString(strings.ToLower(image)); got != want {
			if wrong++; wrong <= 10 {
				t.Errorf("%q: pattern says %v, registryAddress %v", image, got, want)
			}
		}
		if left == 0 {
			return
		}
		for _, p := range pieces {
			walk(image+p, left-1)
		}
	}
	walk("", 5)
	for _, image := range []string{"127.0.0.1:5000/x", "[::1]:5000/x", "0x7f.1/x", "registry.example.com/x", "[fe80::1%25eth0]/x", "Ab.LOCALHOST./x"} {
		_, want := registryAddress(image)
		if got := re.MatchString(strings.ToLower(image)); got != want {
			t.Errorf("%q: pattern says %v, registryAddress %v", image, got, want)
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d strings disagree", wrong, checked)
	}
}

func TestImagesByAddressRefused(t *testing.T) {
	withImages := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "localhost:10250/probe"}}
		p.Spec.Containers[0].Image = "169.254.169.254/latest"
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data",
			VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "[::1]:2379/etcd"}}})
	}
	p := plainPod()
	withImages(p)
	_, err := newTranslator(t).HostPod(p)
	var unsupported *UnsupportedError
	if !errors.As(err, &unsupported) {
		t.Fatalf("images by address: err %v, want an UnsupportedError", err)
	}
	for _, want := range []string{`container "init": image "localhost:10250/probe"`, `image "169.254.169.254/latest"`, `volume "data": image "[::1]:2379/etcd"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}

	p = plainPod()
	withImages(p)
	host, err := newTranslator(t, func(c *Config) { c.AllowRegistryAddresses = true }).HostPod(p)
	if err != nil {
		t.Fatalf("with AllowRegistryAddresses: %v", err)
	}
	if host.Spec.Containers[0].Image != "169.254.169.254/latest" {
		t.Errorf("image %q, want it as written", host.Spec.Containers[0].Image)
	}

	// A running pod's spec after an update; ephemeral containers never run
	// on the host, so theirs are not checked.
	update := &corev1.PodSpec{
		Containers:          []corev1.Container{{Name: "web", Image: "registry.example.com/app:2"}, {Name: "side", Image: "127.0.0.1:5000/app"}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "localhost/debug"}}},
	}
	if got := newTranslator(t).ImageProblems(update); len(got) != 1 || !strings.Contains(got[0], `container "side"`) {
		t.Errorf("an image update by address: problems %q, want one naming container side", got)
	}
}

func TestAlwaysPullImages(t *testing.T) {
	for _, always := range []bool{true, false} {
		p := plainPod()
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", ImagePullPolicy: corev1.PullNever}}
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data",
			VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "example.com/data:1", PullPolicy: corev1.PullIfNotPresent}}})
		host, err := newTranslator(t, func(c *Config) { c.AlwaysPullImages = always }).HostPod(p)
		if err != nil {
			t.Fatal(err)
		}
		var got []corev1.PullPolicy
		for _, c := range append(host.Spec.InitContainers, host.Spec.Containers...) {
			got = append(got, c.ImagePullPolicy)
		}
		for _, v := range host.Spec.Volumes {
			if v.Image != nil {
				got = append(got, v.Image.PullPolicy)
			}
		}
		want := []corev1.PullPolicy{corev1.PullNever, corev1.PullIfNotPresent, corev1.PullIfNotPresent}
		if always {
			want = []corev1.PullPolicy{corev1.PullAlways, corev1.PullAlways, corev1.PullAlways}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("AlwaysPullImages %v: pull policies (-want +got):\n%s", always, diff)
		}
		if p.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
			t.Error("HostPod changed its input")
		}
	}
}

func TestPullFailureMessagesCarryNoProbeResult(t *testing.T) {
	waiting := func(reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "web", Image: "registry.example.com/app:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	cases := []struct {
		reason, msg, want string
	}{
		{"ErrImagePull", `failed to pull and unpack image "registry.example.com/app:1": failed to resolve reference: failed to do request: Head "https://registry.example.com/v2/app/manifests/1": dial tcp 10.0.0.7:443: connect: connection refused`,
			`pulling image "registry.example.com/app:1" failed: the registry could not be reached or refused the request (the host node's message is not shown)`},
		{"ImagePullBackOff", `Back-off pulling image "registry.example.com/app:1": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image: not found`,
			`pulling image "registry.example.com/app:1" failed: not found (the host node's message is not shown)`},
		{"ErrImagePull", `failed to authorize: failed to fetch anonymous token: unexpected status from GET request: 401 Unauthorized`,
			`pulling image "registry.example.com/app:1" failed: access denied (check the pod's imagePullSecrets) (the host node's message is not shown)`},
		// Not a pull failure: left as the host said it.
		{"CreateContainerConfigError", `secret "x" not found`, `secret "x" not found`},
	}
	for _, tc := range cases {
		host := &corev1.Pod{Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{waiting(tc.reason, tc.msg)},
			ContainerStatuses:     []corev1.ContainerStatus{waiting(tc.reason, tc.msg)},
		}}
		s := VirtualStatus(&corev1.Pod{}, host)
		for _, cs := range append(s.InitContainerStatuses, s.ContainerStatuses...) {
			if cs.State.Waiting.Reason != tc.reason || cs.State.Waiting.Message != tc.want {
				t.Errorf("%s %q: virtual status %s %q, want %q", tc.reason, tc.msg, cs.State.Waiting.Reason, cs.State.Waiting.Message, tc.want)
			}
		}
		if host.Status.ContainerStatuses[0].State.Waiting.Message != tc.msg {
			t.Error("VirtualStatus changed the host pod's status")
		}
	}
}

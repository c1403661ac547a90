package kubeletapi

import (
	"crypto/x509"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

func TestLogOptions(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	cases := []struct {
		name    string
		query   string
		want    *corev1.PodLogOptions
		wantErr bool
	}{
		{"no options reads the whole log of the container", "", &corev1.PodLogOptions{Container: "c"}, false},
		{"kubectl logs -f --tail=5 --timestamps", "follow=true&tailLines=5&timestamps=true", &corev1.PodLogOptions{Container: "c", Follow: true, TailLines: ptr.To(int64(5)), Timestamps: true}, false},
		{"previous container with a byte limit", "previous=true&limitBytes=100", &corev1.PodLogOptions{Container: "c", Previous: true, LimitBytes: ptr.To(int64(100))}, false},
		{"since a time and since seconds", "sinceTime=2026-11-30T10:00:00Z&sinceSeconds=60", &corev1.PodLogOptions{Container: "c", SinceTime: &since, SinceSeconds: ptr.To(int64(60))}, false},
		{"a malformed number is refused", "tailLines=many", nil, true},
		{"a malformed time is refused", "sinceTime=yesterday", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := logOptions(httptest.NewRequest("GET", "/containerLogs/ns/p/c?"+tc.query, nil), "c")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostStreamRequest(t *testing.T) {
	tr, err := translate.New(translate.Config{ClusterName: "c1", HostNamespace: "tenant", NodeName: "k3k-c1-kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	host := tr.HostName(translate.KindPod, "shop", "web-0")
	cases := []struct {
		name, path, query string
		wantSub, wantQ    string
		ok                bool
	}{
		{"exec with a command, stdin and a tty", "/exec/shop/web-0/main", "command=sh&command=-c&command=echo+hi&input=1&output=1&tty=1",
			"exec", "command=sh&command=-c&command=echo+hi&container=main&stdin=true&stdout=true&tty=true", true},
		{"exec without stdin keeps stderr apart", "/exec/shop/web-0/main", "command=date&output=1&error=1",
			"exec", "command=date&container=main&stderr=true&stdout=true", true},
		{"a false stream flag is left out", "/exec/shop/web-0/main", "command=date&input=0&output=true",
			"exec", "command=date&container=main&stdout=true", true},
		{"attach carries no command", "/attach/shop/web-0/main", "command=ignored&input=1&output=1",
			"attach", "container=main&stdin=true&stdout=true", true},
		{"port-forward ports are renamed", "/portForward/shop/web-0", "port=8080&port=9090",
			"portforward", "ports=8080&ports=9090", true},
		{"exec without a container is not a kubelet path", "/exec/shop/web-0", "", "", "", false},
		{"the forms with a pod UID are not served", "/exec/shop/web-0/uid/main", "", "", "", false},
		{"port-forward with a container is not a kubelet path", "/portForward/shop/web-0/main", "", "", "", false},
		{"run is not forwarded", "/run/shop/web-0/main", "", "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			query, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			pod, sub, q, ok := hostStreamRequest(tr, strings.Split(strings.Trim(tc.path, "/"), "/"), query)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if pod != host || sub != tc.wantSub || q.Encode() != tc.wantQ {
				t.Errorf("got %s/%s?%s, want %s/%s?%s", pod, sub, q.Encode(), host, tc.wantSub, tc.wantQ)
			}
		})
	}
}

func TestRenewAtIsFourFifthsIntoTheLifetime(t *testing.T) {
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, life := range []time.Duration{10 * time.Second, 24 * time.Hour, 365 * 24 * time.Hour} {
		got := RenewAt(&x509.Certificate{NotBefore: start, NotAfter: start.Add(life)})
		if want := start.Add(life * 8 / 10); !got.Equal(want) {
			t.Errorf("lifetime %s: renew at %s, want %s", life, got, want)
		}
	}
}

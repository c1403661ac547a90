package cluster

import (
	"slices"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func hostClass(name string, created time.Time, expand bool, annotations ...string) storagev1.StorageClass {
	c := storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Provisioner:          "example.com/" + name,
		AllowVolumeExpansion: ptr.To(expand),
	}
	if len(annotations) > 0 {
		c.Annotations = map[string]string{}
		for _, a := range annotations {
			c.Annotations[a] = "true"
		}
	}
	return c
}

func TestStorageClassArgs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		allowed []string
		host    []storagev1.StorageClass
		want    []string
	}{
		{"no classes on the host", []string{"fast"}, nil, nil},
		{"a default that allows expansion",
			nil, []storagev1.StorageClass{hostClass("standard", t0, true, annotationDefaultClass), hostClass("fast", t0, true)},
			[]string{"--default-storage-class=standard", "--expandable-storage-classes=standard"}},
		{"only the classes the Cluster may name are expandable",
			[]string{"fast", "slow", "missing"}, []storagev1.StorageClass{hostClass("standard", t0, false, annotationDefaultClass), hostClass("fast", t0, true), hostClass("slow", t0, false), hostClass("other", t0, true)},
			[]string{"--default-storage-class=standard", "--expandable-storage-classes=fast"}},
		{"the newest of two defaults, as the API server picks",
			nil, []storagev1.StorageClass{hostClass("old", t0, false, annotationDefaultClass), hostClass("new", t0.Add(time.Hour), false, annotationBetaDefaultClass)},
			[]string{"--default-storage-class=new"}},
		{"of two defaults made at once, the first by name",
			nil, []storagev1.StorageClass{hostClass("b", t0, false, annotationDefaultClass), hostClass("a", t0, false, annotationDefaultClass)},
			[]string{"--default-storage-class=a"}},
		{"no default", []string{"fast"}, []storagev1.StorageClass{hostClass("fast", t0, false)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := storageClassArgs(c.allowed, c.host); !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestAgentArgsDescribeTheHostStorageClasses(t *testing.T) {
	c := sampleCluster()
	c.Spec.StorageClasses = []string{"fast"}
	host := AgentHost{StorageClasses: []storagev1.StorageClass{hostClass("standard", time.Now(), false, annotationDefaultClass), hostClass("fast", time.Now(), true)}}
	args := AgentArgs(c, testConfig, host)
	for _, want := range []string{"--storage-classes=fast", "--default-storage-class=standard", "--expandable-storage-classes=fast"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	// Turned off by the host administrator: nothing described, the agent
	// told to show nothing.
	off := testConfig
	off.Agent.DisableStorageClassCopies = true
	args = AgentArgs(c, off, host)
	if slices.ContainsFunc(args, func(a string) bool { return a == "--default-storage-class=standard" }) || !slices.Contains(args, "--storage-class-copies=false") {
		t.Errorf("with copies off, args %q", args)
	}
}

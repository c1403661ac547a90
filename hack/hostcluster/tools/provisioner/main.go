// Command provisioner is a dynamic volume provisioner for the host cluster:
// each pending PVC of a StorageClass naming it gets a hostPath PV in a fresh
// directory under -root, and a Released PV it made whose reclaim policy is Delete
// is removed together with its directory. It polls once a second, which is plenty
// for a test cluster and keeps the program small.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// Name is what a StorageClass's provisioner field says to be served by us.
	Name = "hostcluster.k3k.io/hostpath"
	// pathAnnotation records a PV's directory, so deletion never guesses.
	pathAnnotation = "hostcluster.k3k.io/path"
	selectedNode   = "volume.kubernetes.io/selected-node"
)

func main() {
	log.SetFlags(log.LstdFlags)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	root := flag.String("root", "", "directory the volumes are made in (required)")
	flag.Parse()
	if *kubeconfig == "" || *root == "" {
		flag.Usage()
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	p := &provisioner{client: cs, root: *root}
	for ctx.Err() == nil {
		if err := p.pass(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Print(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

type provisioner struct {
	client kubernetes.Interface
	root   string
}

// pass provisions every claim that waits for us and deletes every released volume.
func (p *provisioner) pass(ctx context.Context) error {
	classes, err := p.client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing storage classes: %w", err)
	}
	ours := map[string]*storagev1.StorageClass{}
	for i := range classes.Items {
		if classes.Items[i].Provisioner == Name {
			ours[classes.Items[i].Name] = &classes.Items[i]
		}
	}
	claims, err := p.client.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" || pvc.Spec.StorageClassName == nil {
			continue
		}
		sc, ok := ours[*pvc.Spec.StorageClassName]
		if !ok {
			continue
		}
		waitsForPod := sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
		if waitsForPod && pvc.Annotations[selectedNode] == "" {
			continue // the scheduler has not placed a pod using it yet
		}
		if err := p.provision(ctx, sc, pvc); err != nil {
			return err
		}
	}
	volumes, err := p.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing volumes: %w", err)
	}
	for i := range volumes.Items {
		pv := &volumes.Items[i]
		if pv.Annotations[pathAnnotation] == "" || pv.Status.Phase != corev1.VolumeReleased ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			continue
		}
		if err := p.remove(ctx, pv); err != nil {
			return err
		}
	}
	return nil
}

func (p *provisioner) provision(ctx context.Context, sc *storagev1.StorageClass, pvc *corev1.PersistentVolumeClaim) error {
	dir := filepath.Join(p.root, fmt.Sprintf("%s_%s_%s", pvc.Namespace, pvc.Name, pvc.UID))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // any pod user may write, as on a fresh disk
		return err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name: "pvc-" + string(pvc.UID),
			Annotations: map[string]string{
				"pv.kubernetes.io/provisioned-by": Name,
				pathAnnotation:                    dir,
			},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              sc.Name,
			PersistentVolumeReclaimPolicy: reclaim,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType},
			},
		},
	}
	// A class with parameter shared: "true" emulates network storage: the
	// nodes of a host cluster share this machine's disk, so its directory is
	// reachable from every node and the volume gets no node affinity (a pod
	// moves to another node with its data). Otherwise the volume is bound to
	// the node the scheduler chose, as a local disk is.
	if node := pvc.Annotations[selectedNode]; node != "" && sc.Parameters["shared"] != "true" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
			}}}},
		}}
	}
	_, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating volume for %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	log.Printf("provisioned %s for %s/%s in %s", pv.Name, pvc.Namespace, pvc.Name, dir)
	return nil
}

func (p *provisioner) remove(ctx context.Context, pv *corev1.PersistentVolume) error {
	dir := pv.Annotations[pathAnnotation]
	if filepath.Dir(dir) != filepath.Clean(p.root) {
		return fmt.Errorf("volume %s: path %s is outside %s, not deleting it", pv.Name, dir, p.root)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting volume %s: %w", pv.Name, err)
	}
	log.Printf("deleted %s and %s", pv.Name, dir)
	return nil
}

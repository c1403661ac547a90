package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// virtualAPIServer reads the cluster's API Service (--api-server-service) in
// the host namespace: pods reach the virtual API by its name
// "<service>.<namespace>.svc", which the server certificate covers, and the
// name is pinned to its ClusterIP in /etc/hosts of every host pod. The agent
// reads it once at start, so it waits here until the controller has made the
// Service; a Service recreated later (new ClusterIP) needs an agent restart
// and new pods.
func virtualAPIServer(ctx context.Context, host kubernetes.Interface, namespace, service string) (translate.APIServer, error) {
	for {
		svc, err := host.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
		if err == nil {
			return apiServerOf(svc), nil
		}
		logr.FromContextOrDiscard(ctx).Info("waiting for the cluster's API Service", "service", service, "error", err.Error())
		select {
		case <-ctx.Done():
			return translate.APIServer{}, fmt.Errorf("reading API Service %s: %w", service, ctx.Err())
		case <-time.After(5 * time.Second):
		}
	}
}

// apiServerOf is the virtual API address a Service describes: its "https"
// port (or its first), and its ClusterIP when it has one.
func apiServerOf(svc *corev1.Service) translate.APIServer {
	a := translate.APIServer{Host: svc.Name + "." + svc.Namespace + ".svc"}
	for i, p := range svc.Spec.Ports {
		if i == 0 || p.Name == "https" {
			a.Port = p.Port
		}
	}
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		a.IP = ip
	}
	return a
}

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
	svc, err := waitForService(ctx, host, namespace, service, "API", func(*corev1.Service) bool { return true })
	if err != nil {
		return translate.APIServer{}, err
	}
	return apiServerOf(svc), nil
}

// serviceClusterIP waits for the cluster's DNS Service (--dns-service) and
// returns its ClusterIP, the nameserver of ClusterFirst pods. Read once, like
// the API Service: a recreated DNS Service needs an agent restart and new
// pods.
func serviceClusterIP(ctx context.Context, host kubernetes.Interface, namespace, service string) (string, error) {
	svc, err := waitForService(ctx, host, namespace, service, "DNS", func(s *corev1.Service) bool {
		return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone
	})
	if err != nil {
		return "", err
	}
	return svc.Spec.ClusterIP, nil
}

// waitForService reads a Service of the host namespace until it exists and
// ok accepts it, every 5 seconds.
func waitForService(ctx context.Context, host kubernetes.Interface, namespace, service, what string, ok func(*corev1.Service) bool) (*corev1.Service, error) {
	for {
		svc, err := host.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
		if err == nil && ok(svc) {
			return svc, nil
		}
		reason := "it has no ClusterIP"
		if err != nil {
			reason = err.Error()
		}
		logr.FromContextOrDiscard(ctx).Info("waiting for the cluster's "+what+" Service", "service", service, "reason", reason)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading %s Service %s: %w", what, service, ctx.Err())
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

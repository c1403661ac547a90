package kubeconfig

import "github.com/k3k-io/k3k/pkg/layout"

// SecretKey is the key of the published kubeconfig in its Secret
// (layout.SecretKeyKubeconfig). The CLI, users and agents all read this key.
const SecretKey = layout.SecretKeyKubeconfig

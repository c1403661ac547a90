// Package agentbootstrap gives a cluster's agents their credentials from the
// kubeconfig Secret mounted as a volume, and follows them through rotation without
// a restart.
//
// Wait blocks until the mounted file holds a kubeconfig that kubeconfig.Validate
// accepts (the controller pre-creates the Secret empty, so at first there is
// nothing), and returns it as a *rest.Config. Run then watches the mounted
// directory. Kubelet updates a Secret volume by writing a new timestamped directory
// and atomically renaming a "..data" symlink over the old one, so the directory,
// not the file, is what changes; every change is read in full, and when it holds
// new valid credentials Run hands them to Config.OnChange, where the agent rebuilds
// its clients. Invalid content never replaces good credentials: the last good ones
// stay in use and Status says why the new content was refused.
//
// Kubelet refreshes a mounted Secret on its own schedule (its pod sync period plus
// the propagation delay of its Secret cache, about a minute by default); this
// package reacts within milliseconds of kubelet's swap.
package agentbootstrap

// Package classsync keeps the virtual cluster's StorageClasses: a copy of
// each host class its claims may name (translate.VirtualStorageClasses),
// the host's default marked default, expansion allowed where the host
// allows it. Without them `kubectl get storageclass` is empty, charts that
// look for a default class fail, and no claim can grow.
//
// One queue of class names is fed by the virtual StorageClasses and, at
// start, by the classes the agent is to show. Each name is reconciled
// level-based: a missing copy is created, a copy that differs is updated
// (or deleted and created again where the field is immutable), a copy that
// is no longer wanted is deleted. A class of the same name the virtual
// cluster's admin made is never touched (translate.IsVirtualStorageClass):
// before these copies existed, making one by hand was the way to let claims
// grow.
//
// It is tested through pkg/agent's suite, against two real kube-apiservers.
package classsync

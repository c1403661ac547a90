// Package servicesync copies a virtual cluster's Services and their
// EndpointSlices into the host namespace, so the virtual cluster's workloads,
// which run as host pods, are reachable through host Services.
//
// One queue of virtual Service keys (namespace/name) is fed by the virtual
// Services, the virtual EndpointSlices (by their kubernetes.io/service-name
// label), the host copies (their annotations name the virtual Service) and the
// host pods the agent runs (an endpoint's address is its host pod's IP, so a
// changed host pod re-queues the Services whose slices name it). Each key is
// reconciled level-based: the host Service and one host EndpointSlice per
// virtual EndpointSlice are computed with package translate and written only
// when their hash annotation differs from the live object's; host slices and
// Services without a virtual counterpart are deleted.
//
// Like podsync, Run holds one set of virtual credentials, acts only after
// every cache has synced (an incomplete virtual cache would look like deleted
// Services) and is restarted by the caller when credentials change. Host
// Services are deleted only after a live read of the virtual API confirms the
// virtual Service is gone.
//
// The package is tested through pkg/agent's suite, which runs it against two
// real kube-apiservers.
package servicesync

// Package publisher copies the admin kubeconfig that k3s writes inside the server
// pod into the cluster's kubeconfig Secret, rewritten to the cluster's Service, and
// restores the cluster's token Secret from the server's own copy when it is lost.
//
// It runs as its own container in the server pod (`datastore publish-kubeconfig`)
// with the pod's ServiceAccount, which may only get, update and patch the two
// Secrets k3k-<name>-kubeconfig and k3k-<name>-token. It never creates a Secret:
// the controller pre-creates both, with their owner reference and labels, and
// recreates an empty placeholder if one is deleted. Until then the publisher
// reports that it cannot recreate the Secret and keeps retrying with backoff; it
// fills the placeholder on its next attempt.
//
// The file k3s writes is not replaced atomically: the publisher may see it missing,
// empty or half-written. It publishes only content that kubeconfig.Validate
// accepts, keeps the last published content otherwise, and writes the Secret only
// when the canonical rewritten bytes differ from what the Secret holds, so an
// unchanged file never causes a write.
//
// k3s writes the file, and opens its port, a few seconds before its API server
// serves. The publisher therefore asks the API server's /readyz through the
// file's own admin credentials before it publishes (state APINotReady until it
// answers ok, retried every APIPoll), and ReadyHandler serves the same question
// on its health port, which the k3s container's readiness probe uses: the pod
// joins the Service only when its API answers.
//
// The token Secret is restored only when it is missing its value. It is never given
// a new random value: the server's token file is the authority, because the server's
// datastore is encrypted with that token and a new one would lock the cluster out
// of its own data.
package publisher

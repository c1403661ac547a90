package kubeletapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Streaming requests (exec, attach, port-forward) are forwarded, not
// terminated: the virtual apiserver's upgrade request is sent on to the host
// API's pods/exec (attach, portforward) of the host pod, and once the host
// answers 101 Switching Protocols the two connections are spliced. The SPDY
// session then runs end to end between the virtual apiserver and the host
// kubelet, so the agent needs no knowledge of the stream protocols and every
// protocol version the two ends agree on works.

// streamKinds maps a kubelet API path segment to the host pods subresource.
var streamKinds = map[string]string{"exec": "exec", "attach": "attach", "portForward": "portforward"}

// hostStreamRequest is where a kubelet streaming request goes on the host:
// the host pod's subresource with the query the host API expects. parts is
// the kubelet path split at "/": kind, namespace, pod and, for exec and
// attach, container. ok is false for paths the kubelet API does not have (or
// that this agent does not serve, such as the forms with a pod UID).
func hostStreamRequest(tr *translate.Translator, parts []string, query url.Values) (hostPod string, sub string, q url.Values, ok bool) {
	sub, ok = streamKinds[parts[0]]
	if !ok {
		return "", "", nil, false
	}
	want := 4
	if sub == "portforward" {
		want = 3
	}
	if len(parts) != want {
		return "", "", nil, false
	}
	hostPod = tr.HostName(translate.KindPod, parts[1], parts[2])
	q = url.Values{}
	if sub == "portforward" {
		// The apiserver names the ports "port"; the pods API calls them "ports".
		for _, p := range query["port"] {
			q.Add("ports", p)
		}
		return hostPod, sub, q, true
	}
	q.Set("container", parts[3])
	// The kubelet's names for the streams, and the pods API's.
	for kubelet, api := range map[string]string{"input": "stdin", "output": "stdout", "error": "stderr", "tty": "tty"} {
		if v := query.Get(kubelet); v != "" {
			if b, err := strconv.ParseBool(v); err == nil && b {
				q.Set(api, "true")
			}
		}
	}
	if sub == "exec" {
		for _, c := range query["command"] {
			q.Add("command", c)
		}
	}
	return hostPod, sub, q, true
}

// streamProxy forwards upgrade requests to the host API.
type streamProxy struct {
	host      *url.URL
	transport http.RoundTripper
}

// newStreamProxy builds the host transport for streams from the host client
// configuration. It speaks HTTP/1.1 only: an upgrade cannot pass over
// HTTP/2, which client-go would otherwise negotiate.
func newStreamProxy(cfg *rest.Config) (*streamProxy, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.NextProtos = []string{"http/1.1"}
	// Streams are long-lived; the client's request timeout would cut them.
	cfg.Timeout = 0
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: host transport for streams: %w", err)
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: host API address: %w", err)
	}
	return &streamProxy{host: host, transport: transport}, nil
}

// serve forwards r to the host pod's subresource. Errors the host answers
// before upgrading (no such pod or container, not running, forbidden) come
// back with the host's status code, the host pod's name replaced by the
// virtual pod's, as for logs.
func (p *streamProxy) serve(w http.ResponseWriter, r *http.Request, hostNS, hostPod, virtualPod, sub string, q url.Values) {
	target := *p.host
	target.Path = strings.TrimSuffix(target.Path, "/") + "/api/v1/namespaces/" + hostNS + "/pods/" + hostPod + "/" + sub
	target.RawQuery = q.Encode()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &target
			pr.Out.Host = target.Host
			// The virtual side's identity headers mean nothing to the host;
			// the host transport adds the agent's own credentials.
			pr.Out.Header.Del("Authorization")
			for name := range pr.Out.Header {
				if strings.HasPrefix(strings.ToLower(name), "impersonate-") || strings.HasPrefix(strings.ToLower(name), "x-remote-") {
					pr.Out.Header.Del(name)
				}
			}
		},
		Transport: p.transport,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return nil
			}
			body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			body = bytes.ReplaceAll(body, []byte(hostPod), []byte(virtualPod))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "reaching the host cluster for "+sub+": "+err.Error(), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

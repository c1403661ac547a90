package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// outputFormats are the values of -o, as kubectl spells them.
const outputFormats = "wide, name, json, yaml, jsonpath=TEMPLATE"

// objectPrinter returns the cli-runtime printer for an -o value that prints
// objects (everything but the table formats); nil for "", "table" and "wide".
func objectPrinter(output string) (printers.ResourcePrinter, error) {
	hint := "use -o " + strings.ReplaceAll(outputFormats, ", ", ", -o ")
	switch {
	case output == "" || output == "table" || output == "wide":
		return nil, nil
	case output == "json":
		return &printers.JSONPrinter{}, nil
	case output == "yaml":
		return &printers.YAMLPrinter{}, nil
	case output == "name":
		return &printers.NamePrinter{}, nil
	case strings.HasPrefix(output, "jsonpath="):
		p, err := printers.NewJSONPathPrinter(strings.TrimPrefix(output, "jsonpath="))
		if err != nil {
			return nil, usageErr("e.g. -o jsonpath='{.items[*].metadata.name}'", "-o %s: %s", output, err.Error())
		}
		return p, nil
	}
	return nil, usageErr(hint, "--output %q is not an output format", output)
}

// printClusters prints list with p, the way kubectl would: types set,
// managed fields left out.
func printClusters(w io.Writer, list *v1beta1.ClusterList, p printers.ResourcePrinter) error {
	out := list.DeepCopy()
	out.APIVersion, out.Kind = v1beta1.GroupVersion.String(), "ClusterList"
	for i := range out.Items {
		out.Items[i].APIVersion, out.Items[i].Kind = v1beta1.GroupVersion.String(), "Cluster"
		out.Items[i].ManagedFields = nil
	}
	if _, ok := p.(*printers.NamePrinter); ok {
		// The name printer prints each item of a list by itself.
		for i := range out.Items {
			if err := p.PrintObj(&out.Items[i], w); err != nil {
				return err
			}
		}
		return nil
	}
	return p.PrintObj(out, w)
}

// clusterTable asks the API server for the clusters as a Table: the columns
// are the CRD's printer columns, the same kubectl get clusters.k3k.io shows.
// path is the list's API path (with or without a namespace).
func clusterTable(ctx context.Context, cfg *rest.Config, path string) (*metav1.Table, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+cfg.APIPath+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the API server answered %d to the table request", resp.StatusCode)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil || table.Kind != "Table" {
		return nil, fmt.Errorf("the API server did not answer with a Table")
	}
	// The rows carry each cluster's metadata (the default includeObject);
	// decoded, they give the printer the namespace column.
	for i := range table.Rows {
		m := &metav1.PartialObjectMetadata{}
		if err := json.Unmarshal(table.Rows[i].Object.Raw, m); err == nil {
			table.Rows[i].Object.Object = m
		}
	}
	return table, nil
}

// printTable prints a server-side Table with cli-runtime's table printer.
// Ages are measured with now (the CLI's clock, injectable in tests) from
// each row's creationTimestamp, rather than with the server's clock.
func printTable(w io.Writer, table *metav1.Table, wide, withNamespace bool, now time.Time) error {
	for c, col := range table.ColumnDefinitions {
		if col.Name != "Age" || col.Type != "date" {
			continue
		}
		for i := range table.Rows {
			m, ok := table.Rows[i].Object.Object.(*metav1.PartialObjectMetadata)
			if ok && c < len(table.Rows[i].Cells) && !m.CreationTimestamp.IsZero() {
				table.Rows[i].Cells[c] = duration.HumanDuration(now.Sub(m.CreationTimestamp.Time))
			}
		}
	}
	return printers.NewTablePrinter(printers.PrintOptions{Wide: wide, WithNamespace: withNamespace}).PrintObj(table, w)
}

package cluster

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureDocListsEveryReconcileStep: docs/architecture.md's "The
// reconcile loop" names the steps of steps() in order, and says how many
// there are. It had drifted twice (6 of 10 steps, then 12 of 14); this keeps
// a new step from going in without the doc.
func TestArchitectureDocListsEveryReconcileStep(t *testing.T) {
	var code []string
	for _, s := range (&Reconciler{}).steps(&observation{}) {
		// A method value's function is named "<pkg>.(*Reconciler).<method>-fm".
		name := runtime.FuncForPC(reflect.ValueOf(s.run).Pointer()).Name()
		name = strings.TrimSuffix(name[strings.LastIndex(name, ".")+1:], "-fm")
		code = append(code, name)
	}
	if len(code) == 0 {
		t.Fatal("steps() returned no steps for a Cluster whose settings resolved")
	}

	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## The reconcile loop\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no section "## The reconcile loop"`)
	}
	paragraph, _, _ := strings.Cut(strings.TrimLeft(section, "\n"), "\n\n")
	var documented []string
	for _, m := range regexp.MustCompile("`(reconcile[A-Z][A-Za-z]*)`").FindAllStringSubmatch(paragraph, -1) {
		documented = append(documented, m[1])
	}
	if !slices.Equal(code, documented) {
		t.Errorf("docs/architecture.md, The reconcile loop, lists the steps\n  %v\nsteps() has\n  %v", documented, code)
	}

	count := regexp.MustCompile(`the (\w+) steps`).FindStringSubmatch(paragraph)
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
		"eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"}
	switch {
	case count == nil:
		t.Error(`docs/architecture.md, The reconcile loop, does not say "the <number> steps"`)
	case len(code) >= len(words) || count[1] != words[len(code)]:
		t.Errorf("docs/architecture.md says %q steps, steps() has %d", count[1], len(code))
	}
}

package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentmbx/agentmbx"

// graph is the module's non-test import graph, package → the module packages it imports
// directly, with paths relative to the module ("host", "relayserver/sqlitestore").
type graph map[string][]string

func loadGraph(t *testing.T) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := graph{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := rel(f[0])
		g[pkg] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"/") {
				g[pkg] = append(g[pkg], rel(imp))
			}
		}
	}
	return g
}

func rel(p string) string { return strings.TrimPrefix(p, module+"/") }

// deps is every module package pkg imports, directly or not.
func (g graph) deps(pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range g[p] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// under reports whether pkg is dir or inside it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

func TestImportsPointDown(t *testing.T) {
	g := loadGraph(t)
	for _, want := range []string{"host", "client", "inbox", "api", "mbx"} {
		if _, ok := g[want]; !ok {
			t.Fatalf("package %s is not in the module's import graph %v", want, g)
		}
	}
	// Above host: the only packages that may import it (the command, the programs and tests that
	// run whole hosts). Every other package, and so every package split out of host (host/...,
	// rotation, the mail store, lan, relaylink, ...), sits below it.
	above := []string{"cmd", "sim", "soak", "mcp", "doctor", "internal/demo"}
	for pkg := range g {
		deps := g.deps(pkg)
		has := func(dir string) bool {
			return slices.ContainsFunc(deps, func(d string) bool { return under(d, dir) })
		}
		if pkg != "host" && !slices.ContainsFunc(above, func(a string) bool { return under(pkg, a) }) && slices.Contains(deps, "host") {
			t.Errorf("%s imports host, which sits above it", pkg)
		}
		switch {
		case pkg == "host" && has("client"):
			t.Errorf("host imports the SDK (client); the control socket's server side is host/control")
		case pkg == "inbox" && has("relayclient"):
			t.Errorf("inbox imports relayclient; it defines the small Relay interface it needs")
		case (pkg == "mbx" || pkg == "api") && len(deps) > 0:
			t.Errorf("%s imports %v; it must stand on the standard library alone", pkg, deps)
		case (pkg == "client" || under(pkg, "host/control")) && slices.ContainsFunc(deps, func(d string) bool { return d != "api" }):
			t.Errorf("%s imports %v; the control socket's two ends depend on api alone", pkg, deps)
		case under(pkg, "relayserver") && slices.ContainsFunc(deps, func(d string) bool {
			return !under(d, "relayserver") && d != "mbx" && !under(d, "internal")
		}):
			t.Errorf("%s imports %v; the relay shares only mbx with the host side", pkg, deps)
		case under(pkg, "host") && has("relayserver"):
			t.Errorf("%s imports relayserver; the host talks to a relay only over HTTP", pkg)
		}
	}
}

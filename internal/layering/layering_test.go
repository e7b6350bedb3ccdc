package layering

import (
	"bufio"
	"fmt"
	"maps"
	"os"
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

// pattern names a package ("host") or, ending in "/…", a folder and everything under it
// ("relayserver/…").
type pattern string

func (p pattern) subtree() (string, bool) { return strings.CutSuffix(string(p), "/…") }

func (p pattern) matches(pkg string) bool {
	if dir, ok := p.subtree(); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == string(p)
}

// rule is one row of the package table: the packages it names and what they may import.
type rule struct {
	line     int
	packages []pattern
	mayAll   bool // "any"
	may      []pattern
}

// specificity ranks how closely p names pkg: an exact name beats any folder, a deeper folder a
// shallower one.
func (p pattern) specificity() int {
	if dir, ok := p.subtree(); ok {
		return strings.Count(dir, "/") * 2
	}
	return 1000
}

// readTable parses the table under "## Packages and the direction of imports" in
// docs/architecture.md: its first column names packages, its last what they may import, each
// name in backquotes.
func readTable(t *testing.T) []rule {
	t.Helper()
	f, err := os.Open("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []rule
	in, n := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## Packages and the direction of imports"
			continue
		case !in || !strings.HasPrefix(l, "| `"):
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("architecture.md:%d: want 3 cells, got %d: %s", n, len(cells), l)
		}
		r := rule{line: n, packages: names(cells[0])}
		if strings.TrimSpace(cells[2]) == "any" {
			r.mayAll = true
		} else {
			r.may = names(cells[2])
		}
		rules = append(rules, r)
	}
	if len(rules) < 10 {
		t.Fatalf("found %d rows in the package table of docs/architecture.md; its heading or format changed?", len(rules))
	}
	return rules
}

// names are the backquoted names of a cell.
func names(cell string) []pattern {
	var out []pattern
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, pattern(parts[i]))
	}
	return out
}

// ruleOf is the row that names pkg most closely.
func ruleOf(rules []rule, pkg string) (rule, bool) {
	best, score := rule{}, -1
	for _, r := range rules {
		for _, p := range r.packages {
			if p.matches(pkg) && p.specificity() > score {
				best, score = r, p.specificity()
			}
		}
	}
	return best, score >= 0
}

// TestImportsFollowTheTable checks every import of every package against its row of the table.
func TestImportsFollowTheTable(t *testing.T) {
	g, rules := loadGraph(t), readTable(t)
	for _, want := range []string{"host", "client", "checkpoint", "api", "mbx", "relayserver"} {
		if _, ok := g[want]; !ok {
			t.Fatalf("package %s is not in the module's import graph", want)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		r, ok := ruleOf(rules, pkg)
		if !ok {
			t.Errorf("%s is in no row of the package table in docs/architecture.md", pkg)
			continue
		}
		if r.mayAll {
			continue
		}
		for _, imp := range g[pkg] {
			if !slices.ContainsFunc(r.may, func(p pattern) bool { return p.matches(imp) }) {
				t.Errorf("%s imports %s; its row (docs/architecture.md:%d) allows %v", pkg, imp, r.line, r.may)
			}
		}
	}
}

// TestNoFolderCycle: no two top-level folders import each other, directly or through others.
func TestNoFolderCycle(t *testing.T) {
	g := loadGraph(t)
	top := func(p string) string { f, _, _ := strings.Cut(p, "/"); return f }
	folders := map[string]map[string]bool{}
	for pkg, imps := range g {
		a := top(pkg)
		if folders[a] == nil {
			folders[a] = map[string]bool{}
		}
		for _, imp := range imps {
			if b := top(imp); b != a {
				folders[a][b] = true
			}
		}
	}
	for _, a := range slices.Sorted(maps.Keys(folders)) {
		if path := findPath(folders, a, a); path != nil {
			t.Errorf("import cycle between top-level folders: %s", strings.Join(path, " → "))
		}
	}
}

// findPath is a path of folder imports from from back to to, or nil.
func findPath(folders map[string]map[string]bool, from, to string) []string {
	seen := map[string]bool{}
	var walk func(string) []string
	walk = func(f string) []string {
		for _, next := range slices.Sorted(maps.Keys(folders[f])) {
			if next == to {
				return []string{f, next}
			}
			if !seen[next] {
				seen[next] = true
				if rest := walk(next); rest != nil {
					return append([]string{f}, rest...)
				}
			}
		}
		return nil
	}
	return walk(from)
}

// TestTheTableCatches: the check refuses an import its row does not name, and a package no row
// names, so it cannot pass vacuously.
func TestTheTableCatches(t *testing.T) {
	rules := readTable(t)
	r, ok := ruleOf(rules, "mbx")
	if !ok || r.mayAll || len(r.may) != 0 {
		t.Fatalf("mbx's row = %+v, %v; want one that allows nothing", r, ok)
	}
	r, _ = ruleOf(rules, "relayserver/sqlitestore")
	if slices.ContainsFunc(r.may, func(p pattern) bool { return p.matches("host") || p.matches("relaylink") }) {
		t.Errorf("relayserver/sqlitestore may import the host side: %v", r.may)
	}
	if _, ok := ruleOf(rules, "nosuchpackage"); ok {
		t.Errorf("a package the table does not name matched a row")
	}
	cyc := map[string]map[string]bool{"host": {"rotation": true}, "rotation": {"host": true}}
	if p := findPath(cyc, "host", "host"); fmt.Sprint(p) != "[host rotation host]" {
		t.Errorf("findPath on a two-folder cycle = %v", p)
	}
}

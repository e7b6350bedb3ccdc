package mbx

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in   string
		want Address // zero: refused
	}{
		{"bob@beta", Address{Kind: AddrAgent, Name: "bob", Host: "beta"}},
		{"carol-2@Mac-Mini.local", Address{Kind: AddrAgent, Name: "carol-2", Host: "Mac-Mini.local"}},
		{"owner@beta", Address{Kind: AddrAgent, Name: "owner", Host: "beta"}},
		{"bob@b", Address{Kind: AddrAgent, Name: "bob", Host: "b"}},
		{"bob", Address{Kind: AddrName, Name: "bob"}},
		{"0x", Address{Kind: AddrName, Name: "0x"}},
		{strings.Repeat("a", 40), Address{Kind: AddrName, Name: strings.Repeat("a", 40)}},
		{"role:reviewer", Address{Kind: AddrRole, Role: "reviewer"}},
		{"role:QA.lead_2", Address{Kind: AddrRole, Role: "QA.lead_2"}},
		{"*", Address{Kind: AddrBroadcast}},
		{"owner", Address{Kind: AddrOwner}},
		{"", Address{}},
		{"b", Address{}},                     // names have 2+ characters
		{strings.Repeat("a", 41), Address{}}, // at most 40
		{"Bob@beta", Address{}},              // names are lowercase
		{"-bob", Address{}},                  // start with a letter or digit
		{"bob@", Address{}},                  // empty host
		{"@beta", Address{}},                 // empty name
		{"bob@beta@gamma", Address{}},        // one '@'
		{"bob@-beta", Address{}},             // host starts with a letter or digit
		{"bob@" + strings.Repeat("h", 64), Address{}},
		{"bob@be ta", Address{}},
		{" bob", Address{}},               // no trimming
		{"role:", Address{}},              // empty role
		{"role:code reviewer", Address{}}, // no spaces
		{"role:" + strings.Repeat("r", 41), Address{}},
		{"ROLE:x", Address{}},
		{"**", Address{}},
		{"Owner", Address{}},
		{"bob\n", Address{}},
		{"bøb", Address{}},
	}
	for _, tt := range tests {
		got, err := ParseAddress(tt.in)
		if tt.want.IsZero() {
			if !errors.Is(err, ErrBadAddress) {
				t.Errorf("ParseAddress(%q) = %+v, %v; want ErrBadAddress", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseAddress(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.in {
			t.Errorf("ParseAddress(%q).String() = %q", tt.in, s)
		}
	}
}

func TestAddressErrorsSayWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"":              "empty",
		"Bob@beta":      "agent name",
		"bob@-x":        "host name",
		"role:a b":      "role",
		"bob@beta@else": "host name",
	} {
		_, err := ParseAddress(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseAddress(%q) error %v; want it to quote the input and mention %q", in, err, want)
		}
	}
}

func TestAddressKindString(t *testing.T) {
	for k, want := range map[AddressKind]string{AddrAgent: "agent", AddrName: "name", AddrRole: "role", AddrBroadcast: "broadcast", AddrOwner: "owner", 0: "AddressKind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestAddressText(t *testing.T) {
	var to struct{ To []Address }
	if err := json.Unmarshal([]byte(`{"To":["bob@beta","*","role:x","owner","carol"]}`), &to); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(to)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"To":["bob@beta","*","role:x","owner","carol"]}`; got != want {
		t.Errorf("round trip = %s, want %s", got, want)
	}
	if err := json.Unmarshal([]byte(`{"To":["Bob"]}`), &to); !errors.Is(err, ErrBadAddress) {
		t.Errorf("Unmarshal of a bad address = %v, want ErrBadAddress", err)
	}
	for _, a := range []Address{{}, {Kind: AddrAgent, Name: "bob"}, {Kind: AddrName, Name: "bob", Host: "x"}, {Kind: 9}} {
		if _, err := a.MarshalText(); !errors.Is(err, ErrBadAddress) {
			t.Errorf("MarshalText(%+v) = %v, want ErrBadAddress", a, err)
		}
	}
}

// dir is a Directory for tests.
type dir struct {
	self   string
	agents map[string]string   // local agent → role
	live   []string            // live local agents
	paired []string            // approved peers
	remote map[string][]string // agent name → hosts where it is known
}

func (d dir) LocalHost() string            { return d.self }
func (d dir) LocalAgent(name string) bool  { _, ok := d.agents[name]; return ok }
func (d dir) LiveAgents() []string         { return d.live }
func (d dir) PairedHosts() []string        { return d.paired }
func (d dir) AgentHosts(n string) []string { return d.remote[n] }
func (d dir) RoleAgents(role string) []string {
	var out []string
	for _, a := range d.live {
		if d.agents[a] == role {
			out = append(out, a)
		}
	}
	return out
}

func TestExpandRecipients(t *testing.T) {
	d := dir{
		self:   "alpha",
		agents: map[string]string{"alice": "lead", "ann": "reviewer", "idle": "reviewer"},
		live:   []string{"alice", "ann"},
		paired: []string{"beta", "gamma"},
		remote: map[string][]string{"bob": {"beta"}, "dup": {"beta", "gamma"}, "ghost": {"delta"}, "alice": {"beta"}},
	}
	tests := []struct {
		name         string
		to           []string
		local        []string
		remote       []string
		warnings     int
		receiveLocal []string
	}{
		{"agent on a paired host", []string{"bob@beta"}, nil, []string{"beta"}, 0, nil},
		{"agent here", []string{"ann@alpha"}, []string{"ann"}, nil, 0, []string{"ann"}},
		{"host not paired", []string{"bob@delta"}, nil, nil, 1, nil},
		{"bare local name wins", []string{"alice"}, []string{"alice"}, nil, 0, []string{"alice"}},
		{"bare name on one paired host", []string{"bob"}, nil, []string{"beta"}, 0, []string{"bob"}},
		{"bare name on two hosts", []string{"dup"}, nil, nil, 1, []string{"dup"}},
		{"bare name only on an unpaired host", []string{"ghost"}, []string{"ghost"}, nil, 1, []string{"ghost"}},
		{"broadcast", []string{"*"}, []string{"alice", "ann"}, []string{"beta", "gamma"}, 0, []string{"alice", "ann"}},
		{"role", []string{"role:reviewer"}, []string{"ann"}, []string{"beta", "gamma"}, 0, []string{"ann"}},
		{"owner", []string{"owner"}, []string{"owner"}, nil, 0, []string{"owner"}},
		{"each once, in order", []string{"bob@beta", "ann", "*", "bob", "ann@alpha"}, []string{"ann", "alice"}, []string{"beta", "gamma"}, 0, []string{"ann", "alice", "bob"}},
		{"bad address", []string{"Bob@beta", "bob@beta"}, nil, []string{"beta"}, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ExpandRecipients(tt.to, d)
			if !slices.Equal(r.Local, tt.local) || !slices.Equal(r.Remote, tt.remote) || len(r.Warnings) != tt.warnings {
				t.Errorf("ExpandRecipients(%q) = local %q remote %q warnings %q; want local %q remote %q and %d warnings",
					tt.to, r.Local, r.Remote, r.Warnings, tt.local, tt.remote, tt.warnings)
			}
			if got := LocalRecipients(tt.to, d); !slices.Equal(got, tt.receiveLocal) {
				t.Errorf("LocalRecipients(%q) = %q, want %q", tt.to, got, tt.receiveLocal)
			}
		})
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"bob@beta", "bob", "role:reviewer", "*", "owner", "owner@x", "a@b@c", "role:", "", "Bob", "x@Y.z_-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			if !errors.Is(err, ErrBadAddress) {
				t.Fatalf("ParseAddress(%q) error %v is not ErrBadAddress", s, err)
			}
			return
		}
		if a.String() != s {
			t.Fatalf("ParseAddress(%q).String() = %q", s, a.String())
		}
		b, err := a.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%+v): %v", a, err)
		}
		var back Address
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Fatalf("text round trip of %q = %+v, %v", s, back, err)
		}
	})
}

package router

import (
	"fmt"
	"strings"

	"github.com/flybus/flybus/wire"
)

// Pattern matches service or topic names: any name, one exact name, or every
// name starting with a prefix. A call grant's pattern may also limit the
// methods it admits (Methods).
type Pattern struct {
	kind  uint8 // patAny, patExact, patPrefix
	value string
	// methods, when set, is a call grant's limit on the method: the same
	// kinds of match, over method names.
	methods *Pattern
}

const (
	patAny = iota + 1
	patExact
	patPrefix
)

// Any matches every name.
func Any() Pattern { return Pattern{kind: patAny} }

// Exact matches one name.
func Exact(name string) Pattern { return Pattern{kind: patExact, value: name} }

// Prefix matches every name that starts with p ("agent." matches
// "agent.fly-a").
func Prefix(p string) Pattern { return Pattern{kind: patPrefix, value: p} }

// Methods limits a call grant to the methods m admits: Exact("status"),
// Prefix("Admin."), Any(). Only call grants look at it.
func (p Pattern) Methods(m Pattern) Pattern {
	p.methods = &m
	return p
}

// ParsePattern reads the configuration spelling of a pattern: "*" is Any,
// "x.*" is Prefix("x.") for a valid name x, a valid service or topic name
// is Exact. A call grant may add "/METHOD": "svc/status" admits that one
// method, "svc/Admin.*" every method starting with "Admin.", "svc/*" any.
// Anything else ("ab*", "a..*", "") is refused: a grant that reads
// differently from what it admits is a grant nobody meant.
func ParsePattern(s string) (Pattern, error) {
	if name, method, ok := strings.Cut(s, "/"); ok {
		p, err := ParsePattern(name)
		if err != nil {
			return Pattern{}, err
		}
		var m Pattern
		switch {
		case method == "*":
			m = Any()
		case strings.HasSuffix(method, "*") && method != "*" && wire.ValidMethod(strings.TrimSuffix(method, "*")):
			m = Prefix(strings.TrimSuffix(method, "*"))
		case wire.ValidMethod(method):
			m = Exact(method)
		default:
			return Pattern{}, fmt.Errorf("pattern %q: the method after \"/\" must be \"*\", \"prefix*\" or a method name", s)
		}
		return p.Methods(m), nil
	}
	switch {
	case s == "*":
		return Any(), nil
	case strings.HasSuffix(s, ".*") && wire.ValidName(strings.TrimSuffix(s, ".*")):
		return Prefix(strings.TrimSuffix(s, "*")), nil
	case wire.ValidName(s):
		return Exact(s), nil
	}
	return Pattern{}, fmt.Errorf("pattern %q: want \"*\", \"prefix.*\" or an exact service or topic name", s)
}

// Match reports whether the pattern admits name.
func (p Pattern) Match(name string) bool {
	switch p.kind {
	case patAny:
		return true
	case patExact:
		return name == p.value
	case patPrefix:
		return strings.HasPrefix(name, p.value)
	}
	return false
}

func (p Pattern) String() string {
	s := p.value
	switch p.kind {
	case patAny:
		s = "*"
	case patPrefix:
		s = p.value + "*"
	}
	if p.methods != nil {
		s += "/" + p.methods.String()
	}
	return s
}

// HasMethods reports whether p limits methods, which only call grants do.
func (p Pattern) HasMethods() bool { return p.methods != nil }

// Grants lists what one client may do. An empty list grants nothing.
type Grants struct {
	Register     []Pattern
	Call         []Pattern
	Publish      []Pattern
	Subscribe    []Pattern
	ManageTopics []Pattern // topic.declare, topic.clear, topic.delete
}

// AllGrants grants everything.
func AllGrants() Grants {
	a := []Pattern{Any()}
	return Grants{Register: a, Call: a, Publish: a, Subscribe: a, ManageTopics: a}
}

func matchAny(ps []Pattern, name string) bool {
	for _, p := range ps {
		if p.Match(name) {
			return true
		}
	}
	return false
}

// matchCall reports whether a call grant admits method of target.
func matchCall(ps []Pattern, target, method string) bool {
	for _, p := range ps {
		if p.Match(target) && (p.methods == nil || p.methods.Match(method)) {
			return true
		}
	}
	return false
}

// Policy decides who may connect and what each client may do.
type Policy struct {
	open    bool
	clients map[string]Grants
	dflt    *Grants
}

// OpenPolicy admits any client id with every grant, and is the only policy
// under which unbound (self-asserted) transports are allowed: a trusted or
// test deployment.
func OpenPolicy() Policy { return Policy{open: true} }

// ClosedPolicy admits only the clients added with Client.
func ClosedPolicy() Policy { return Policy{clients: map[string]Grants{}} }

// Client returns a copy of the policy that admits id with grants.
func (p Policy) Client(id string, g Grants) Policy {
	m := make(map[string]Grants, len(p.clients)+1)
	for k, v := range p.clients {
		m[k] = v
	}
	m[id] = g
	p.clients = m
	return p
}

// WithDefault returns a copy that admits unlisted ids with g (nil: refuse
// them).
func (p Policy) WithDefault(g *Grants) Policy {
	p.dflt = g
	return p
}

// admitsNobody reports a policy under which no hello can succeed: the zero
// Policy, or a closed one with no clients and no default.
func (p Policy) admitsNobody() bool { return !p.open && len(p.clients) == 0 && p.dflt == nil }

// IsOpen reports whether unbound transports are permitted.
func (p Policy) IsOpen() bool { return p.open }

// grants returns the grants of a client id, and false when it may not
// connect at all.
func (p Policy) grants(id string) (Grants, bool) {
	if p.open {
		return AllGrants(), true
	}
	if g, ok := p.clients[id]; ok {
		return g, true
	}
	if p.dflt != nil {
		return *p.dflt, true
	}
	return Grants{}, false
}

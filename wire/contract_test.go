package wire

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// renderShape renders a body type the way Contract writes it, from the Go
// struct: json tags give the member names, wire tags or the Go type give the
// value labels. Changing a body type changes this rendering.
func renderShape(t reflect.Type) string {
	var parts []string
	for _, m := range shapeMembers(t, nil) {
		key := m.key
		if m.optional {
			key += "?"
		}
		parts = append(parts, key+":"+m.label)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// shapeMember is one member of a body as Contract writes it. An optional
// member (json ",omitempty") is written key?:label, and its key here has
// no "?".
type shapeMember struct {
	key, label string
	optional   bool
}

// shapeMembers appends the members of the struct t (or *t) to out. An
// embedded struct without a json name contributes its own members in its
// place, as encoding/json flattens it.
func shapeMembers(t reflect.Type, out []shapeMember) []shapeMember {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = shapeMembers(f.Type, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		optional := opts == "omitempty"
		label := f.Tag.Get("wire")
		if label == "" {
			label = typeLabel(f.Type)
			if optional {
				// Absent, not null, when unset.
				label = strings.TrimSuffix(label, "|null")
			}
		}
		out = append(out, shapeMember{name, label, optional})
	}
	return out
}

var labels = map[reflect.Type]string{
	reflect.TypeFor[StoreID]():     "StoreId",
	reflect.TypeFor[RouterID]():    "RouterId",
	reflect.TypeFor[ConnID]():      "ConnId",
	reflect.TypeFor[ArtifactID]():  "ArtifactId",
	reflect.TypeFor[ServiceInc]():  "SvcId",
	reflect.TypeFor[TopicInc]():    "TopicId",
	reflect.TypeFor[SubID]():       "SubId",
	reflect.TypeFor[CallID]():      "CallId",
	reflect.TypeFor[DeliveryID]():  "DeliveryId",
	reflect.TypeFor[OwnerID]():     "OwnerId",
	reflect.TypeFor[Digest]():      "Digest",
	reflect.TypeFor[RawJSON]():     "object",
	reflect.TypeFor[bool]():        "bool",
	reflect.TypeFor[ArtifactRef](): "ArtifactRef",
	reflect.TypeFor[Location]():    "Location",
	reflect.TypeFor[Identity]():    "Identity",
	reflect.TypeFor[Limits]():      "Limits",
}

func typeLabel(t reflect.Type) string {
	if l, ok := labels[t]; ok {
		return l
	}
	if strings.HasPrefix(t.Name(), "Opt[") {
		return typeLabel(t.Field(1).Type) + "|null"
	}
	return "?" + t.String()
}

func renderLimits() string {
	parts := []string{}
	for _, n := range LimitNames() {
		label := "int"
		if IsByteLimit(n) {
			label = "U64"
		}
		parts = append(parts, n+":"+label)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func renderContract() string {
	var b strings.Builder
	b.WriteString(fmt.Sprintf("flybus contract %d.%d\n", Major, Minor))
	b.WriteString(`envelope {protocol:"flybus", major:int, minor:int, id:MsgId|BusId, replyTo:MsgId|null, kind:command|reply|delivery|notice, op:Op, body:object, attachments:[Attachment 0..32]}` + "\n")
	b.WriteString("reply {ok:true, value:object} | {ok:false, error:{code:ErrorCode, message:Text, dispatch:Dispatch}}\n")
	for _, v := range []any{ArtifactRef{}, Attachment{}, Location{}, Identity{}} {
		t := reflect.TypeOf(v)
		b.WriteString(t.Name() + " " + renderShape(t) + "\n")
	}
	b.WriteString("Limits " + renderLimits() + "\n")
	var atts []string
	for _, s := range Shapes() {
		b.WriteString(s.Kind.String() + " " + s.Op.String() + " " + renderShape(reflect.TypeOf(s.Body)))
		if s.Reply != nil {
			b.WriteString(" -> " + renderShape(reflect.TypeOf(s.Reply)))
		}
		b.WriteString("\n")
		if s.Op.CarriesAttachments() {
			atts = append(atts, s.Op.String())
		}
	}
	for _, e := range Extensions() {
		parts := []string{"extension", e.Name}
		parts = append(parts, e.Members...)
		for _, op := range e.Notices {
			parts = append(parts, op.String())
		}
		b.WriteString(strings.Join(parts, " ") + "\n")
	}
	b.WriteString("attachments " + strings.Join(atts, " ") + "\n")
	// The codes are part of the contract: adding one changes the digest.
	var codes []string
	for _, c := range AllErrorCodes() {
		codes = append(codes, c.String())
	}
	b.WriteString("errors " + strings.Join(codes, " ") + "\n")
	b.WriteString("dispatch " + NotDispatched.String() + " " + Dispatched.String() + " " + DispatchUnknown.String() + "\n")
	return b.String()
}

func TestContractMatchesBodyTypes(t *testing.T) {
	got := renderContract()
	if got != Contract {
		gl, wl := strings.Split(got, "\n"), strings.Split(Contract, "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("line %d:\n types:    %s\n Contract: %s", i+1, g, w)
			}
		}
		t.Fatal("the body types and the Contract text disagree: change Contract (and so the digest) with the types")
	}
}

func TestContractCoversEveryOp(t *testing.T) {
	seen := map[Op]bool{}
	for _, s := range Shapes() {
		if seen[s.Op] {
			t.Errorf("%s listed twice", s.Op)
		}
		seen[s.Op] = true
		if (s.Kind == KindCommand) != s.Op.IsCommand() || (s.Kind == KindCommand) != (s.Reply != nil) {
			t.Errorf("%s: kind %s disagrees with its op class or reply", s.Op, s.Kind)
		}
	}
	for o := OpHello; o < numOps; o++ {
		if !seen[o] {
			t.Errorf("%s has no shape", o)
		}
	}
}

func TestContractDigest(t *testing.T) {
	d := ContractDigest()
	if len(d) != 64 {
		t.Fatalf("digest %q", d)
	}
	if _, ok := ParseDigest(d); !ok {
		t.Fatalf("digest %q does not parse", d)
	}
}

// The frozen 1.1 contract is the one 1.1 clients were built against: its
// digest is the one they check, and 1.2 adds to it only the quiet-consume
// extension.
func TestOlderContracts(t *testing.T) {
	d, ok := ContractDigestFor(1)
	if !ok || d.String() != "faf9569adaf2b31f0360163faba1660a22d8ad305f13e368a39fde7db8d30eeb" {
		t.Fatalf("1.1 digest %s (%v)", d, ok)
	}
	old, _ := ContractFor(1)
	want := strings.Replace(strings.Replace(old, "contract 1.1", "contract 1.2", 1),
		"extension presence subscription.publishers\n", "extension presence subscription.publishers\nextension quiet-consume\n", 1)
	if want != Contract {
		t.Fatal("1.2's contract is not 1.1's with the quiet-consume extension")
	}
	if d, ok := ContractDigestFor(Minor); !ok || d != ContractDigestValue() {
		t.Fatal("the current minor's digest")
	}
	for _, m := range []uint32{0, Minor + 1} {
		if _, ok := ContractDigestFor(m); ok {
			t.Errorf("minor %d has a contract", m)
		}
	}
}

package wire

import "strconv"

// Shared shapes: references, attachments, locations, identities and the
// small enums that several bodies use.

// Location is a private grant naming a file beneath the client's configured
// store root: <root>/<storeId>/<relativePath>. It never appears in
// application bodies.
type Location struct {
	StoreID      StoreID `json:"storeId"`
	RelativePath string  `json:"relativePath" wire:"RelPath"`
}

// MaxRelPathLen bounds a location's relative path.
const MaxRelPathLen = 255

// ValidRelPathBytes reports whether b is a relative, slash-separated path of
// [A-Za-z0-9._-] components, none empty, "." or "..".
func ValidRelPathBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxRelPathLen {
		return false
	}
	start := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '/' {
			c := b[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
			continue
		}
		comp := b[start:i]
		if len(comp) == 0 || string(comp) == "." || string(comp) == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// Identity is a participant as the router authenticated it.
type Identity struct {
	ClientID          string `json:"clientId" wire:"Id"`
	ClientIncarnation string `json:"clientIncarnation" wire:"Id"`
}

// Retention is a topic's retained setting.
type Retention uint8

const (
	RetainNone Retention = iota + 1
	RetainLatest
)

func (r Retention) String() string {
	switch r {
	case RetainNone:
		return "none"
	case RetainLatest:
		return "latest"
	}
	return "Retention(" + strconv.Itoa(int(r)) + ")"
}

// Mode is a subscription mode.
type Mode uint8

const (
	ModeLatest Mode = iota + 1
	ModeBounded
)

func (m Mode) String() string {
	switch m {
	case ModeLatest:
		return "latest"
	case ModeBounded:
		return "bounded"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// CancelState is rpc.cancel's complete result enum.
type CancelState uint8

const (
	CancelledBeforeDispatch CancelState = iota + 1
	ExecutionUnknown
	Completed
	CallGoneState
)

var cancelNames = [...]string{
	CancelledBeforeDispatch: "cancelled-before-dispatch", ExecutionUnknown: "execution-unknown",
	Completed: "completed", CallGoneState: "call-gone",
}

func (c CancelState) String() string {
	if c != 0 && int(c) < len(cancelNames) {
		return cancelNames[c]
	}
	return "CancelState(" + strconv.Itoa(int(c)) + ")"
}

// enum reads a string member that must be one of names (index 0 unused).
func (f *fields) enum(names []string) (uint8, error) {
	b, err := f.strTok()
	if err != nil {
		return 0, err
	}
	for i := 1; i < len(names); i++ {
		if names[i] == string(b) {
			return uint8(i), nil
		}
	}
	return 0, f.fail("unknown value")
}

var (
	retentionNames = []string{"", "none", "latest"}
	modeNames      = []string{"", "latest", "bounded"}
)

func (r *ArtifactRef) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "storeId":
			var v uint64
			v, err = f.tag("store-")
			r.StoreID = StoreID(v)
			f.mark(0)
		case "artifactId":
			var v uint64
			v, err = f.serial(FamArtifact)
			r.ArtifactID = ArtifactID(v)
			f.mark(1)
		case "generation":
			r.Generation, err = f.u64()
			f.mark(2)
		case "byteLength":
			r.ByteLength, err = f.u64()
			f.mark(3)
		case "contentType":
			r.ContentType, err = f.contentType()
			f.mark(4)
		case "digest":
			r.Digest, err = f.optDigest()
			f.mark(5)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(1<<6-1, "storeId", "artifactId", "generation", "byteLength", "contentType", "digest")
}

// AppendJSON appends the reference as a JSON object.
func (r *ArtifactRef) AppendJSON(b []byte) []byte {
	b = append(b, `{"storeId":"`...)
	b = appendTag(b, "store-", uint64(r.StoreID))
	b = append(b, `","artifactId":`...)
	b = appendSerialStr(b, FamArtifact, uint64(r.ArtifactID))
	b = append(b, `,"generation":`...)
	b = appendU64Str(b, r.Generation)
	b = append(b, `,"byteLength":`...)
	b = appendU64Str(b, r.ByteLength)
	b = append(b, `,"contentType":`...)
	b = appendString(b, r.ContentType)
	b = append(b, `,"digest":`...)
	if r.Digest.Valid {
		b = appendDigest(b, r.Digest.V)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

func (a *Attachment) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "name":
			a.Name, err = f.id()
			f.mark(0)
		case "ref":
			err = a.Ref.decodeJSON(d, f.val, "attachment.ref")
			f.mark(1)
		case "ownerId":
			a.OwnerID, err = f.owner()
			f.mark(2)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(7, "name", "ref", "ownerId")
}

// AppendJSON appends the attachment as a JSON object.
func (a *Attachment) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, a.Name)
	b = append(b, `,"ref":`...)
	b = a.Ref.AppendJSON(b)
	b = append(b, `,"ownerId":`...)
	b = appendOwner(b, a.OwnerID)
	return append(b, '}')
}

func (l *Location) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "storeId":
			var v uint64
			v, err = f.tag("store-")
			l.StoreID = StoreID(v)
			f.mark(0)
		case "relativePath":
			var b []byte
			if b, err = f.strTok(); err == nil {
				if ValidRelPathBytes(b) {
					l.RelativePath = d.intern(b)
				} else {
					err = f.fail("not a relative path beneath the store")
				}
			}
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "storeId", "relativePath")
}

// AppendJSON appends the location as a JSON object.
func (l *Location) AppendJSON(b []byte) []byte {
	b = append(b, `{"storeId":"`...)
	b = appendTag(b, "store-", uint64(l.StoreID))
	b = append(b, `","relativePath":`...)
	b = appendString(b, l.RelativePath)
	return append(b, '}')
}

func (id *Identity) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	f, err := d.object(ti, ctx)
	if err != nil {
		return err
	}
	for f.next() {
		switch string(f.key) {
		case "clientId":
			id.ClientID, err = f.id()
			f.mark(0)
		case "clientIncarnation":
			id.ClientIncarnation, err = f.id()
			f.mark(1)
		default:
			err = f.unknown()
		}
		if err != nil {
			return err
		}
	}
	return f.require(3, "clientId", "clientIncarnation")
}

// AppendJSON appends the identity as a JSON object.
func (id *Identity) AppendJSON(b []byte) []byte {
	b = append(b, `{"clientId":`...)
	b = appendString(b, id.ClientID)
	b = append(b, `,"clientIncarnation":`...)
	b = appendString(b, id.ClientIncarnation)
	return append(b, '}')
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// Helpers shared by the tools that talk to a running router as a client
// (declare, pub, sub, call): checking the connection flags, reading the
// payload, connecting under the right id and reporting failures alike.

// idRules and nameRules state the wire's rules in the words of the errors
// that refuse an id or a name, so the operator can fix it at once.
const (
	idRules   = "1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
	nameRules = "1-192 of a-z, 0-9, '.', '_', '-', in dot-separated segments none of which is empty, e.g. cam.frames"
)

// checkName refuses a topic or service name the router would refuse.
func checkName(kind, name string) error {
	if wire.ValidName(name) {
		return nil
	}
	return fmt.Errorf("%q is not a %s name (%s)", name, kind, nameRules)
}

// checkClientFlags validates the flags every client tool has; it returns
// the usage error's message, or "" when they are fine. An empty id means
// the default, chosen at connect time.
func checkClientFlags(id string, timeout time.Duration) string {
	switch {
	case id != "" && !wire.ValidID(id):
		return fmt.Sprintf("%q is not a valid client id (%s)", id, idRules)
	case timeout <= 0:
		return "--timeout must be positive"
	}
	return ""
}

// stdin is where a "-" payload is read from; a variable so that in-process
// tests can supply one.
var stdin io.Reader = os.Stdin

// payloadArg is a payload argument read: its bytes and how to name it in
// a message.
type payloadArg struct {
	data  []byte
	where string // "the payload", "the payload in FILE", "the payload on stdin"
	echo  bool   // short and typed inline: errors may quote it
}

// readPayload reads a payload argument: inline JSON, @FILE or - (stdin).
// No JSON text starts with '@' or is "-", so the forms cannot be confused.
// At most one byte more than an envelope holds is read: anything longer
// cannot be sent, however it continues.
func readPayload(arg string) (payloadArg, error) {
	var r io.Reader
	p := payloadArg{where: "the payload"}
	switch {
	case arg == "-":
		r, p.where = stdin, "the payload on stdin"
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return p, fmt.Errorf("payload: %w", err)
		}
		defer f.Close()
		r, p.where = f, "the payload in "+arg[1:]
	default:
		p.data, p.echo = []byte(arg), len(arg) <= 120
		return p, nil
	}
	data, err := io.ReadAll(io.LimitReader(r, wire.MaxEnvelopeBytes+1))
	if err != nil {
		return p, fmt.Errorf("reading %s: %w", p.where, err)
	}
	// A file or a pipe usually ends with a newline: the message carries
	// the JSON without it.
	p.data = bytes.TrimSpace(data)
	return p, nil
}

// payloadArgument reads and checks a payload argument (inline JSON, @FILE
// or -); the error is a usage error's message.
func payloadArgument(arg string) ([]byte, error) {
	p, err := readPayload(arg)
	if err != nil {
		return nil, err
	}
	if msg := p.check(); msg != "" {
		return nil, errors.New(msg)
	}
	return p.data, nil
}

// check validates the payload as the router would; it returns the usage
// error's message, or "". The message gives the scanner's reason.
func (p payloadArg) check() string {
	if len(p.data) >= wire.MaxEnvelopeBytes {
		return oversizeHint(fmt.Sprintf("%s is over %s bytes", p.where, groupDigits(wire.MaxEnvelopeBytes)))
	}
	quoted := ""
	if p.echo {
		quoted = " in " + string(p.data)
	}
	if len(bytes.TrimSpace(p.data)) == 0 {
		return p.where + " is empty; give a JSON object such as '{}'"
	}
	if err := wire.Valid(p.data); err != nil {
		return fmt.Sprintf("%s is not strict JSON: %s%s", p.where, scanReason(p.data, err), quoted)
	}
	if first := bytes.TrimSpace(p.data); first[0] != '{' {
		return fmt.Sprintf("%s must be a JSON object, not %s%s", p.where, jsonKind(first[0]), quoted)
	}
	return ""
}

// scanReason is the scanner's refusal in words: its message and offset,
// and for a duplicate key the key itself, which the scanner does not name.
func scanReason(data []byte, err error) string {
	var se *wire.SyntaxError
	if !errors.As(err, &se) {
		return err.Error()
	}
	if strings.Contains(se.Msg, "duplicate") && !strings.Contains(se.Msg, `"`) {
		if key, off, ok := duplicateKey(data, se.Offset); ok {
			return fmt.Sprintf("duplicate key %s at offset %d", strconv.Quote(key), off)
		}
	}
	return fmt.Sprintf("%s at offset %d", se.Msg, se.Offset)
}

// duplicateKey finds a repeated key (compared after unescaping, as the
// scanner does) and the offset of its second occurrence. The scanner
// reports the end of the object that holds it, so that object's duplicate
// is preferred; any other is a fallback.
func duplicateKey(data []byte, objectEnd int) (key string, offset int, ok bool) {
	type object struct {
		keys      map[string]bool
		expectKey bool
		dup       string
		dupAt     int
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []*object
	first, firstAt := "", -1
	for {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			break
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				if top != nil {
					top.expectKey = true
				}
				stack = append(stack, &object{keys: map[string]bool{}, expectKey: true})
			case '[':
				if top != nil {
					top.expectKey = true
				}
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
				if t == '}' && top != nil && top.dup != "" && int(dec.InputOffset()) == objectEnd {
					return top.dup, top.dupAt, true
				}
				if len(stack) > 0 && stack[len(stack)-1] != nil {
					stack[len(stack)-1].expectKey = true
				}
			}
			continue
		}
		if top == nil {
			continue // an array element or the top-level value
		}
		if !top.expectKey {
			top.expectKey = true // that was a member's value
			continue
		}
		top.expectKey = false
		k := tok.(string)
		if top.keys[k] && top.dup == "" {
			at := before + bytes.IndexByte(data[before:], '"')
			top.dup, top.dupAt = k, at
			if firstAt < 0 {
				first, firstAt = k, at
			}
		}
		top.keys[k] = true
	}
	return first, firstAt, firstAt >= 0
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// oversizeHint says what to do with bytes that do not fit in a message.
func oversizeHint(what string) string {
	return fmt.Sprintf("%s; a message's envelope holds at most %s bytes in all: put the bytes in a file and attach it as an artifact (--artifact NAME=FILE --store DIR)",
		what, groupDigits(wire.MaxEnvelopeBytes))
}

// tooLarge reports the SDK's refusal of an envelope over the limit.
func tooLarge(err error) bool {
	return errors.Is(err, wire.ErrInvalidEnvelope) && strings.Contains(err.Error(), strconv.Itoa(wire.MaxEnvelopeBytes))
}

func groupDigits(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// defaultClientID is a tool's id when --client is not given: unique, so
// that any number of tools run at once on an open socket.
func defaultClientID(tool string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "flybus-" + tool + "-" + hex.EncodeToString(b[:])
}

// boundRefusal matches the router's refusal of a hello on a bound socket,
// which names the id the socket is bound to.
var boundRefusal = regexp.MustCompile(`bound to client id "([a-z0-9][a-z0-9._-]{0,63})"`)

// boundID returns the id a NOT_AUTHORIZED hello refusal names, if any.
func boundID(err error) (string, bool) {
	var be *wire.BusError
	if !errors.As(err, &be) || be.Code != wire.ErrNotAuthorized {
		return "", false
	}
	m := boundRefusal.FindStringSubmatch(be.Message)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// connectTool connects a tool to socket. With id "" (no --client) it
// connects under a fresh default id; a bound socket refuses that, naming
// its id, and the tool connects once more as that id. It returns the id
// used, for messages.
func connectTool(ctx context.Context, socket, tool, id string, cfg client.Config) (*client.Client, string, error) {
	return toolClient(ctx, client.ConnectUnix, socket, tool, id, cfg)
}

// dialTool is connectTool for a tool that runs until it is stopped: the
// client waits for the router (within ctx) and reconnects after losing it.
func dialTool(ctx context.Context, socket, tool, id string, cfg client.Config) (*client.Client, string, error) {
	return toolClient(ctx, client.DialUnix, socket, tool, id, cfg)
}

func toolClient(ctx context.Context, connect func(context.Context, string, client.Config) (*client.Client, error),
	socket, tool, id string, cfg client.Config) (*client.Client, string, error) {
	explicit := id != ""
	if !explicit {
		id = defaultClientID(tool)
	}
	cfg.ClientID = id
	bus, err := connect(ctx, socket, cfg)
	if err == nil || explicit {
		return bus, id, err
	}
	bound, ok := boundID(err)
	if !ok || bound == id {
		return nil, id, err
	}
	cfg.ClientID, cfg.ClientIncarnation = bound, ""
	bus, err = connect(ctx, socket, cfg)
	return bus, bound, err
}

// toolContext is a client tool's context: it ends on the first of
// signals or after timeout, connecting included.
func toolContext(timeout time.Duration, signals ...os.Signal) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}

// toolFailed prints why a client tool failed and returns the failure
// status. A bus error reads CODE: message, after any context the tool
// wrapped around it (which artifact, say); anything else is prefixed with
// the command's name.
func toolFailed(stderr io.Writer, name string, timeout time.Duration, err error) int {
	var be *wire.BusError
	switch {
	case errors.As(err, &be):
		fmt.Fprintln(stderr, err.Error())
		if tooLarge(err) {
			fmt.Fprintf(stderr, "flybus %s: %s\n", name, oversizeHint("the message is too large"))
		}
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "flybus %s: gave up after %v\n", name, timeout)
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "flybus %s: interrupted\n", name)
	default:
		// The SDK's errors begin "flybus: ": say it once.
		fmt.Fprintf(stderr, "flybus %s: %s\n", name, strings.TrimPrefix(err.Error(), "flybus: "))
	}
	return exitFailure
}

// storeHint explains a store location the client could not open: the
// router granted it, so almost always --store is not the router's root.
func storeHint(err error, root string) error {
	var se *store.Error
	if errors.As(err, &se) {
		return fmt.Errorf("%w (is --store %s the router's store root?)", err, root)
	}
	return err
}

// connectFailed is toolFailed for bus.hello, with a hint for the refusals
// an operator meets most: a second live connection under one client id,
// and a --client other than the id a socket is bound to.
func connectFailed(stderr io.Writer, name, id string, timeout time.Duration, err error) int {
	toolFailed(stderr, name, timeout, err)
	connectHints(stderr, name, id, err)
	return exitFailure
}

func connectHints(stderr io.Writer, name, id string, err error) {
	if errors.Is(err, wire.ErrConflict) {
		fmt.Fprintf(stderr, "flybus %s: another live connection uses client id %q; pick another with --client\n", name, id)
	}
	if bound, ok := boundID(err); ok && bound != id {
		fmt.Fprintf(stderr, "flybus %s: this socket admits only %s; leave out --client (or give --client %s)\n", name, bound, bound)
	}
}

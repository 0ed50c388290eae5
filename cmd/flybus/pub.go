package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

var pubCmd = &command{
	name:    "pub",
	summary: "publish a JSON message to a topic, with files as artifacts",
	run:     runPub,
	usage:   pubUsage,
}

// artifactOptions are the flags that attach files, shared by pub and call.
type artifactOptions struct {
	artifacts    listFlag
	contentTypes listFlag
	store        string
}

func (o *artifactOptions) define(set *flag.FlagSet) {
	set.Var(&o.artifacts, "artifact", "attach `NAME=FILE`: FILE's bytes as the artifact NAME (repeatable, at most 32)")
	set.Var(&o.contentTypes, "content-type", "label the artifact NAME: `NAME=TYPE` (repeatable); by default the type is\nguessed from FILE's extension, else application/octet-stream")
	set.StringVar(&o.store, "store", "", "the router's store root `DIR`, as given to serve --store (required with --artifact)")
}

// clientFlagUsage describes --client for every tool.
const clientFlagUsage = "connect as client `ID`; by default a fresh flybus-TOOL-XXXXXXXX on an open socket,\nand on a bound socket the id it is bound to (which is all it admits)"

// payloadNotes describes the JSON argument of pub and call.
const payloadNotes = `JSON is the payload object itself, @FILE to read it from FILE, or - to read it
from stdin. A message's envelope holds at most 65,536 bytes: anything bigger
travels as an artifact (--artifact NAME=FILE), which costs no copy per reader.
`

// messageOptions are the flags of the tools that send a message, pub and
// call.
type messageOptions struct {
	artifactOptions
	client  string
	timeout time.Duration
}

// pubOptions and callOptions are messageOptions, each with the plan of its
// own positional arguments.
type (
	pubOptions  messageOptions
	callOptions messageOptions
)

// flags defines the flags of the command name; only --timeout's text
// differs between pub and call.
func (o *messageOptions) flags(name, timeoutUsage string) *flag.FlagSet {
	set := newFlagSet(name)
	o.define(set)
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	durationVar(set, &o.timeout, "timeout", 10*time.Second, timeoutUsage)
	return set
}

func pubFlags(o *pubOptions) *flag.FlagSet {
	return (*messageOptions)(o).flags("pub", "give up after `D`, connecting and copying the files included")
}

func pubUsage() string {
	notes := `Connects to SOCKET and publishes the JSON object to TOPIC, which must be
declared (flybus declare). Each --artifact file is copied into the router's
store, sealed and attached under its NAME; subscribers read the same bytes,
never a copy per subscriber. Prints the receipt and exits 0:

  published TOPIC #SEQ to N subscriber(s), M replaced

(M counts queued messages of latest-mode subscribers that this one replaced).
A refusal, such as NO_TOPIC or BACKPRESSURE from a full bounded subscriber,
prints CODE: message to stderr and exits 1; nothing is published.

` + payloadNotes
	return usageText("flybus pub SOCKET TOPIC JSON|@FILE|- [--artifact NAME=FILE]... [--content-type NAME=TYPE]... [--store DIR] [--client ID] [--timeout D]",
		"Publish a JSON message to a topic, with files as artifacts.", pubFlags(&pubOptions{}), notes,
		walkExample("pub"))
}

// pubFile is one --artifact: a file to copy into the store under a name.
type pubFile struct {
	name, path, contentType string
}

// messagePlan is what a checked pub or call command line sends, and where.
type messagePlan struct {
	socket  string
	payload []byte
	files   []pubFile
}

// pubPlan is a checked pub command line.
type pubPlan struct {
	messagePlan
	topic string
}

// plan checks the positional arguments and flags without touching the
// files or the router (a payload from @FILE or stdin is read); the error
// is a usage error's message.
func (o *pubOptions) plan(pos []string) (*pubPlan, error) {
	if len(pos) != 3 {
		return nil, fmt.Errorf("want SOCKET TOPIC JSON, got %d arguments", len(pos))
	}
	p := &pubPlan{topic: pos[1]}
	if err := checkName("topic", p.topic); err != nil {
		return nil, err
	}
	var err error
	if p.messagePlan, err = (*messageOptions)(o).message(pos[0], pos[2]); err != nil {
		return nil, err
	}
	return p, nil
}

// message reads and checks what pub and call send: the payload argument,
// the client flags and the artifact flags; the error is a usage error's
// message.
func (o *messageOptions) message(socket, payloadArg string) (messagePlan, error) {
	payload, err := payloadArgument(payloadArg)
	if err != nil {
		return messagePlan{}, err
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return messagePlan{}, errors.New(msg)
	}
	files, err := o.files()
	if err != nil {
		return messagePlan{}, err
	}
	return messagePlan{socket: socket, payload: payload, files: files}, nil
}

// files checks the artifact flags; the error is a usage error's message.
func (o *artifactOptions) files() ([]pubFile, error) {
	if len(o.artifacts) > wire.MaxAttachments {
		return nil, fmt.Errorf("%d artifacts; a message carries at most %d", len(o.artifacts), wire.MaxAttachments)
	}
	var files []pubFile
	index := map[string]int{}
	for _, a := range o.artifacts {
		name, path, err := splitAssignment("--artifact", a, "NAME=FILE")
		if err != nil {
			return nil, err
		}
		if _, dup := index[name]; dup {
			return nil, fmt.Errorf("--artifact %s is given twice; attachment names must differ", name)
		}
		index[name] = len(files)
		files = append(files, pubFile{name: name, path: path})
	}
	labelled := map[string]bool{}
	for _, t := range o.contentTypes {
		name, ct, err := splitAssignment("--content-type", t, "NAME=TYPE")
		if err != nil {
			return nil, err
		}
		i, ok := index[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("--content-type %s names no --artifact", name)
		case labelled[name]:
			return nil, fmt.Errorf("--content-type %s is given twice", name)
		case !wire.ValidContentType(ct):
			return nil, fmt.Errorf("--content-type %s: %q is not a content type (1-127 printable ASCII characters)", name, ct)
		}
		labelled[name] = true
		files[i].contentType = ct
	}
	for i := range files {
		if files[i].contentType == "" {
			files[i].contentType = guessContentType(files[i].path)
		}
	}
	if len(files) > 0 && o.store == "" {
		return nil, errors.New("--artifact needs --store DIR, the router's store root (as given to flybus serve --store): the client writes the files there")
	}
	return files, nil
}

// splitAssignment splits a NAME=VALUE flag value and checks the name is an
// attachment name (a wire Id).
func splitAssignment(flagName, v, form string) (name, value string, err error) {
	name, value, ok := strings.Cut(v, "=")
	switch {
	case !ok || value == "":
		return "", "", fmt.Errorf("%s takes %s, not %q", flagName, form, v)
	case !wire.ValidID(name):
		return "", "", fmt.Errorf("%s %s: %q is not an attachment name (%s)", flagName, v, name, idRules)
	}
	return name, value, nil
}

// guessContentType labels a file by its extension, as a browser would; the
// wire needs some label, and application/octet-stream claims nothing.
func guessContentType(path string) string {
	if t := mime.TypeByExtension(filepath.Ext(path)); t != "" && wire.ValidContentType(t) {
		return t
	}
	return "application/octet-stream"
}

// pubSource is an opened --artifact file. The size is taken once, at open:
// the allocation is exactly that long.
type pubSource struct {
	pubFile
	f    *os.File
	size int64
}

// openSources opens every file before connecting, so a missing or unusable
// file is refused before anything is allocated.
func openSources(files []pubFile) ([]*pubSource, error) {
	var out []*pubSource
	for _, pf := range files {
		f, err := os.Open(pf.path)
		if err == nil {
			var fi fs.FileInfo
			if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
				err = fmt.Errorf("%s is not a regular file (its size must be known before copying)", pf.path)
			}
			if err == nil {
				out = append(out, &pubSource{pubFile: pf, f: f, size: fi.Size()})
				continue
			}
			f.Close()
		}
		closeSources(out)
		return nil, fmt.Errorf("--artifact %s: %w", pf.name, err)
	}
	return out, nil
}

func closeSources(srcs []*pubSource) {
	for _, s := range srcs {
		s.f.Close()
	}
}

func runPub(c *command, args []string, stdout, stderr io.Writer) int {
	o := &pubOptions{}
	p, code, ok := parsePlan(c, pubFlags(o), o.plan, args, stdout, stderr)
	if !ok {
		return code
	}
	failed := func(err error) int { return toolFailed(stderr, c.name, o.timeout, err) }
	// Ctrl-C abandons cleanly: unsealed staging files are released.
	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	return sendMessage(c, (*messageOptions)(o), &p.messagePlan, stderr, signals, failed,
		func(ctx context.Context, bus *client.Client, atts []client.Attachment) error {
			r, err := bus.Publish(ctx, p.topic, wire.RawJSON(p.payload), atts...)
			if err == nil {
				fmt.Fprintf(stdout, "published %s #%d to %d subscriber(s), %d replaced\n", p.topic, r.TopicSequence, r.Subscribers, r.Replaced)
			}
			return err
		})
}

// sendMessage runs pub or call from a checked command line: it opens the
// files, connects until signals or the timeout, uploads every file as a
// sealed artifact and sends the message with them (send). failed reports
// an error in the command's words and returns the exit status. The
// artifacts are this client's holds: they are closed once the message has
// been answered, since an admitted message owns its deliveries'
// references and a refused one needs nothing.
func sendMessage(c *command, o *messageOptions, p *messagePlan, stderr io.Writer, signals []os.Signal, failed func(error) int,
	send func(ctx context.Context, bus *client.Client, atts []client.Attachment) error) int {
	srcs, err := openSources(p.files)
	if err != nil {
		// Nothing was done: a bad argument, but the usage text would
		// bury the one line that matters.
		fmt.Fprintf(stderr, "flybus %s: %v\n", c.name, err)
		return exitUsage
	}
	defer closeSources(srcs)

	ctx, cancel := toolContext(o.timeout, signals...)
	defer cancel()
	bus, id, err := connectTool(ctx, p.socket, c.name, o.client, client.Config{StoreRoot: o.store})
	if err != nil {
		failed(err)
		connectHints(stderr, c.name, id, err)
		return exitFailure
	}
	defer bus.Close()
	atts, err := uploadAll(ctx, bus, srcs, o.store)
	defer closeAttachments(atts)
	if err == nil {
		err = send(ctx, bus, atts)
	}
	if err != nil {
		return failed(err)
	}
	return exitOK
}

// uploadAll uploads every source as a sealed artifact. The caller closes
// the attachments (closeAttachments) once they have been sent, also when
// uploadAll fails part way.
func uploadAll(ctx context.Context, bus *client.Client, srcs []*pubSource, storeRoot string) ([]client.Attachment, error) {
	atts := make([]client.Attachment, 0, len(srcs))
	for _, s := range srcs {
		a, err := upload(ctx, bus, s, storeRoot)
		if err != nil {
			return atts, fmt.Errorf("artifact %s: %w", s.name, err)
		}
		atts = append(atts, client.Attach(s.name, a))
	}
	return atts, nil
}

func closeAttachments(atts []client.Attachment) {
	for _, a := range atts {
		a.Artifact.Close()
	}
}

// copyBufferSize is large enough that the copy costs few system calls and
// small enough that a huge file never sits in memory whole.
const copyBufferSize = 1 << 20

// upload allocates an artifact of the file's size, streams the file into
// it and seals it.
func upload(ctx context.Context, bus *client.Client, s *pubSource, storeRoot string) (*client.Artifact, error) {
	w, err := bus.Allocate(ctx, s.size, s.contentType)
	if err != nil {
		return nil, storeHint(err, storeRoot)
	}
	defer w.Close() // abandons the staging file unless it was sealed
	buf := make([]byte, min(max(s.size, 1), copyBufferSize))
	n, err := io.CopyBuffer(w, io.NewSectionReader(s.f, 0, s.size), buf)
	if err != nil {
		return nil, fmt.Errorf("copying %s: %w", s.path, err)
	}
	if n != s.size {
		return nil, fmt.Errorf("copying %s: the file shrank to %d bytes while being copied (it had %d)", s.path, n, s.size)
	}
	return w.Seal(ctx)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/flybus/flybus/client"
)

var subCmd = &command{
	name:    "sub",
	summary: "subscribe to a topic and print its messages",
	run:     runSub,
	usage:   subUsage,
}

type subOptions struct {
	latest, bounded bool
	replay          bool
	count           int
	saveDir         string
	store           string
	client          string
	timeout         time.Duration
}

func subFlags(o *subOptions) *flag.FlagSet {
	set := newFlagSet("sub")
	set.BoolVar(&o.latest, "latest", false, "keep only the newest undelivered message and never slow a publisher\n(the default)")
	set.BoolVar(&o.bounded, "bounded", false, "queue up to 64 messages and miss none; a full queue refuses publishers\nwith BACKPRESSURE")
	set.BoolVar(&o.replay, "replay", false, "first deliver the topic's retained message, if it keeps one")
	set.IntVar(&o.count, "count", 0, "exit 0 after `N` messages (0: until interrupted)")
	set.StringVar(&o.saveDir, "save-artifacts", "", "write each attachment to `DIR`/SEQ-NAME (created if missing; needs --store)")
	set.StringVar(&o.store, "store", "", "the router's store root `DIR`, as given to serve --store (required with\n--save-artifacts)")
	set.StringVar(&o.client, "client", "", clientFlagUsage)
	durationVar(set, &o.timeout, "timeout", 10*time.Second, "give up connecting and subscribing after `D` (the router is waited for\nthat long); messages, a topic not declared yet and reconnections are\nawaited without limit")
	return set
}

func subUsage() string {
	notes := `Subscribes to TOPIC and prints a first line to stderr, then one line per
message to stdout:

  subscribed to TOPIC (sub-N)
  #SEQ TOPIC PAYLOAD [(replaced R)] [[NAME: BYTES bytes, ...]]

Start order does not matter: a router not up yet is waited for (up to
--timeout), and a topic nobody has declared yet too (the first line then
ends "waiting for it to be declared"). sub outlives its router: when the
router stops or restarts, it reconnects and subscribes again, saying so
on stderr, and goes on printing what is published after that.

(replaced R) counts the messages a latest-mode subscription skipped; the
brackets list the attachments. With --save-artifacts the files are complete
before their line is printed (each is written under a temporary name, then
renamed; mode 0600). Once subscribed, SIGINT or SIGTERM unsubscribes and
exits 0, as does reaching --count. When the router ends the subscription
(a plain one could not be made again, or a grant was withdrawn), sub says
why on stderr and exits 1.
`
	return usageText("flybus sub SOCKET TOPIC [--latest|--bounded] [--replay] [--count N] [--save-artifacts DIR --store DIR] [--client ID] [--timeout D]",
		"Subscribe to a topic and print its messages.", subFlags(&subOptions{}), notes,
		walkExample("sub"))
}

// check validates the command line; the error is a usage error's message.
func (o *subOptions) check(pos []string) (socket, topic string, cfg []client.SubscribeOption, err error) {
	if len(pos) != 2 {
		return "", "", cfg, fmt.Errorf("want SOCKET TOPIC, got %d arguments", len(pos))
	}
	socket, topic = pos[0], pos[1]
	if err := checkName("topic", topic); err != nil {
		return "", "", cfg, err
	}
	switch {
	case o.latest && o.bounded:
		return "", "", cfg, errors.New("--latest and --bounded exclude each other")
	case o.count < 0:
		return "", "", cfg, errors.New("--count must not be negative")
	case o.saveDir != "" && o.store == "":
		return "", "", cfg, errors.New("--save-artifacts needs --store DIR, the router's store root (as given to flybus serve --store): the client reads the artifacts there")
	}
	if msg := checkClientFlags(o.client, o.timeout); msg != "" {
		return "", "", cfg, errors.New(msg)
	}
	if o.bounded {
		cfg = append(cfg, client.Bounded())
	}
	if o.replay {
		cfg = append(cfg, client.Replay())
	}
	return socket, topic, cfg, nil
}

func runSub(c *command, args []string, stdout, stderr io.Writer) int {
	o := &subOptions{}
	pos, code, ok := parse(c, subFlags(o), args, stdout, stderr)
	if !ok {
		return code
	}
	socket, topic, cfg, err := o.check(pos)
	if err != nil {
		return usageError(c, stderr, err.Error())
	}
	if o.saveDir != "" {
		if err := os.MkdirAll(o.saveDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "flybus sub: --save-artifacts: %v\n", err)
			return exitUsage
		}
	}

	// The signals are how an operator ends a subscription: they end the
	// wait for the next message, and the deferred closes unsubscribe.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// A subscriber outlives router restarts: it reconnects and subscribes
	// again until its --count is reached or it is stopped.
	bus, id, err := dialTool(setup, socket, c.name, o.client, client.Config{StoreRoot: o.store})
	if err != nil {
		return connectFailed(stderr, c.name, id, o.timeout, err)
	}
	defer bus.Close()
	// Any start order: a topic nobody has declared yet is waited for.
	sub, err := bus.Subscribe(setup, topic, append(cfg, client.AwaitTopic())...)
	if err != nil {
		return toolFailed(stderr, c.name, o.timeout, err)
	}
	defer sub.Close()
	cancel()
	// Scripts and tests wait for this line before they publish.
	if sub.TopicIncarnation() == 0 {
		fmt.Fprintf(stderr, "subscribed to %s (%s), waiting for it to be declared\n", topic, sub.ID())
	} else {
		fmt.Fprintf(stderr, "subscribed to %s (%s)\n", topic, sub.ID())
	}

	p := &printer{out: stdout, saveDir: o.saveDir, store: o.store}
	for n := 0; o.count == 0 || n < o.count; n++ {
		m, err := sub.Next(ctx)
		if err == nil {
			err = p.handle(ctx, m)
		}
		switch {
		case ctx.Err() != nil:
			return exitOK // interrupted: the deferred closes unsubscribe
		case errors.Is(err, client.ErrSubscriptionClosed):
			// The error names the topic and the router's reason.
			fmt.Fprintf(stderr, "flybus sub: %s\n", strings.TrimPrefix(err.Error(), "flybus: "))
			return exitFailure
		case err != nil:
			fmt.Fprintf(stderr, "flybus sub: %v\n", err)
			return exitFailure
		}
	}
	return exitOK
}

// printer renders messages, one line each, saving attachments first.
type printer struct {
	out     io.Writer
	saveDir string
	store   string // for hints only: the client config holds the root
	line    bytes.Buffer
}

// handle prints m and closes it, which consumes its delivery. The line is
// written in one call, after any files, so whoever reads it sees a whole
// line and finished files.
func (p *printer) handle(ctx context.Context, m *client.Message) error {
	defer m.Close()
	names, err := attachmentNames(m)
	if err != nil {
		return err
	}
	b := &p.line
	b.Reset()
	fmt.Fprintf(b, "#%d %s ", m.TopicSequence, m.Topic)
	// One message, one line, even if the publisher sent indented JSON.
	if json.Compact(b, m.Payload) != nil {
		b.Write(m.Payload)
	}
	if m.Replaced > 0 {
		fmt.Fprintf(b, " (replaced %d)", m.Replaced)
	}
	for i, name := range names {
		size, err := p.attachment(ctx, m, name)
		if err != nil {
			return err
		}
		sep := ", "
		if i == 0 {
			sep = " ["
		}
		fmt.Fprintf(b, "%s%s: %d bytes", sep, name, size)
	}
	if len(names) > 0 {
		b.WriteByte(']')
	}
	b.WriteByte('\n')
	_, err = p.out.Write(b.Bytes())
	return err
}

// attachment returns the size of m's attachment name, saving it first when
// asked to.
func (p *printer) attachment(ctx context.Context, m *client.Message, name string) (uint64, error) {
	a, err := m.Artifact(name)
	if err != nil {
		return 0, fmt.Errorf("#%d attachment %s: %w", m.TopicSequence, name, err)
	}
	defer a.Close()
	size := a.Ref().ByteLength
	if p.saveDir == "" {
		return size, nil
	}
	path := filepath.Join(p.saveDir, fmt.Sprintf("%d-%s", m.TopicSequence, name))
	if err := saveArtifact(ctx, a, path); err != nil {
		return 0, fmt.Errorf("#%d attachment %s: %w", m.TopicSequence, name, storeHint(err, p.store))
	}
	return size, nil
}

// saveArtifact writes a's bytes to path through a read-only view, so the
// bytes go from the store's pages to the file without a heap copy. The
// file appears under its name only once complete.
func saveArtifact(ctx context.Context, a *client.Artifact, path string) (err error) {
	v, err := a.View(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(v.Bytes()); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// attachmentNames lists a message's attachment names, sorted so that the
// output does not depend on the publisher's order.
func attachmentNames(m *client.Message) ([]string, error) {
	names := m.Attachments()
	slices.Sort(names)
	return names, nil
}

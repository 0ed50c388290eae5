package edge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/flybus/flybus/client"
)

// Feed is where the edge's publications come from: a connection to a
// router kept up, with one subscription per topic (latest, one in flight,
// replay). The rest of the edge sees only this interface.
type Feed interface {
	// Run feeds sink until ctx ends, then returns nil, having closed
	// everything it opened.
	Run(ctx context.Context, topics []string, sink Sink) error
}

// Sink receives what a Feed sees. Calls for one topic come from one
// goroutine; calls for different topics may run at once.
type Sink interface {
	// BusUp and BusDown report the connection's state; BusDown may repeat
	// while the router stays away.
	BusUp(routerID string)
	BusDown(err error)
	// TopicState says whether topic is subscribed, and if not why.
	TopicState(topic string, subscribed bool, err error)
	// Deliver hands over one message, which the sink must close. The
	// topic's next message comes only after the message is consumed.
	Deliver(ctx context.Context, topic string, m *client.Message)
}

// Dialer makes the edge's client: a reconnecting one (client.Dial or
// client.DialUnix), which waits for its router until ctx ends.
type Dialer func(ctx context.Context) (*client.Client, error)

// Follow is a Feed over one reconnecting client made by dial. The SDK
// redials after a loss and subscribes every topic again (awaiting a topic
// its producer has not declared yet), so the same subscriptions go on
// delivering across router restarts; Follow only reports the state.
func Follow(dial Dialer) Feed { return &follow{dial: dial} }

type follow struct{ dial Dialer }

// closeTimeout bounds the goodbye to a router: one that went away answers
// at once, one that hangs must not hold up the edge's exit.
const closeTimeout = 2 * time.Second

// errWaiting is the feed's state while the first connection is made.
var errWaiting = errors.New("waiting for the router")

func (f *follow) Run(ctx context.Context, topics []string, sink Sink) error {
	sink.BusDown(errWaiting)
	c, err := f.dial(ctx)
	if ctx.Err() != nil {
		if c != nil {
			closeClient(c)
		}
		return nil
	}
	if err != nil {
		return err // refused for good: a bound socket, a store root, a version
	}
	defer closeClient(c)
	sink.BusUp(c.Info().RouterID.String())
	var wg sync.WaitGroup
	var followed []string
	for _, t := range topics {
		// Latest, one in flight: a slow edge skips to the newest frame.
		sub, err := c.Subscribe(ctx, t, client.InFlight(1), client.Replay(), client.AwaitTopic())
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			sink.TopicState(t, false, err) // refused (a grant, say): nothing to retry
			continue
		}
		sink.TopicState(t, true, nil)
		followed = append(followed, t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			for {
				m, err := sub.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						sink.TopicState(t, false, err) // names the topic and the router's reason
					}
					return
				}
				sink.Deliver(ctx, t, m)
			}
		}()
	}
	watchState(ctx, c, sink, followed)
	wg.Wait()
	return nil
}

// watchState reports the client's connection state to sink until ctx
// ends, on the client's own announcements. Back on a router, the client
// has subscribed the followed topics again.
func watchState(ctx context.Context, c *client.Client, sink Sink, followed []string) {
	up := true
	for {
		st, changed := c.State()
		switch {
		case st == client.Connected && !up:
			sink.BusUp(c.Info().RouterID.String())
			for _, t := range followed {
				sink.TopicState(t, true, nil)
			}
			up = true
		case st == client.Reconnecting && up:
			sink.BusDown(c.Err())
			up = false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func closeClient(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.CloseContext(ctx)
}

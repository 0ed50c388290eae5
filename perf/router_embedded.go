package perf

import (
	"context"
	"errors"
	"github.com/flybus/flybus/store"
	"os"
	"runtime/pprof"
	"time"

	"github.com/flybus/flybus/router"
)

// embeddedRouter is router.New in this process, listening on a Unix
// socket like a router process would, so that the clients pay the same
// transport either way.
type embeddedRouter struct {
	r    *router.Router
	sock string
}

func startEmbedded(storeRoot string, mode store.Mode, sock string) (*embeddedRouter, error) {
	r, err := router.New(router.Config{StoreRoot: storeRoot, StoreMode: mode, Policy: router.OpenPolicy()})
	if err != nil {
		return nil, err
	}
	if _, err := r.ListenUnix(sock); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return nil, errors.Join(err, r.Shutdown(ctx))
	}
	return &embeddedRouter{r: r, sock: sock}, nil
}

func (e *embeddedRouter) info() Router {
	return Router{Mode: "embedded", PID: os.Getpid(), RouterID: e.r.RouterID().String(),
		StoreDir: e.r.StoreDir(), Socket: e.sock, ExitStatus: -1}
}

func (e *embeddedRouter) stats() statsSource          { return embeddedStats{e.r} }
func (e *embeddedRouter) cpu() (time.Duration, error) { return SelfCPU() }
func (e *embeddedRouter) what() string {
	return "whole process (embedded: router and clients together)"
}
func (e *embeddedRouter) memory() (Memory, error) { return ReadMemory(os.Getpid()) }
func (e *embeddedRouter) resetPeak() error        { return ResetPeakRSS(os.Getpid()) }

// profile uses runtime/pprof: in embedded mode it profiles the clients too.
// The profile stops after seconds, or when ctx ends.
func (e *embeddedRouter) profile(ctx context.Context, seconds int, file string) (func() error, error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(time.Duration(seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		pprof.StopCPUProfile()
	}()
	return func() error {
		<-done
		return f.Close()
	}, nil
}

func (e *embeddedRouter) stop(ctx context.Context) error { return e.r.Shutdown(ctx) }

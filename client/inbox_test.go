package client

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// item is an inbox entry with nothing to give back.
type item int

func (item) Close() error { return nil }

// waiters parks n goroutines in next and returns what each one gets.
func waiters(b *inbox[item], n int) (<-chan item, <-chan error) {
	got, ended := make(chan item, n), make(chan error, n)
	for range n {
		go func() {
			v, err := b.next(context.Background())
			if err != nil {
				ended <- err
				return
			}
			got <- v
		}()
	}
	return got, ended
}

// Every waiter parked in next is woken by what concerns it: pushes in a row
// each reach a waiter, and a close reaches them all (it reached one of
// three before the wake-up was passed on). The push race the passing-on
// also closes, two waiters between their look at the queue and their wait,
// cannot be staged from outside.
func TestInboxWakesEveryWaiter(t *testing.T) {
	t.Run("pushes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newInbox[item]()
			got, _ := waiters(&b, 2)
			synctest.Wait()
			b.push(1)
			b.push(2)
			synctest.Wait()
			if len(got) != 2 {
				t.Fatalf("%d of 2 waiters got an item", len(got))
			}
			b.close(errors.New("done"))
		})
	})
	t.Run("close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newInbox[item]()
			want := errors.New("done")
			_, ended := waiters(&b, 3)
			synctest.Wait()
			b.close(want)
			synctest.Wait()
			if len(ended) != 3 {
				t.Fatalf("%d of 3 waiters saw the close", len(ended))
			}
			for range 3 {
				if err := <-ended; err != want {
					t.Fatalf("next after close: %v, want %v", err, want)
				}
			}
		})
	})
}

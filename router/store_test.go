package router_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestRouterOwnsItsStoreDirectory(t *testing.T) {
	root := t.TempDir()
	r := openRouterOn(t, root)
	dir := r.StoreDir()
	if filepath.Base(dir) != r.StoreID().String() || filepath.Dir(dir) != root {
		t.Fatalf("store dir %s for %s", dir, r.StoreID())
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir: %v %v", fi, err)
	}
	// A second live router on the same root never touches the first.
	r2 := openRouterOn(t, root)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a live store was removed: %v", err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("clean shutdown left %s: %v", dir, err)
	}
	if err := r2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

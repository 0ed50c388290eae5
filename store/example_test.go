package store_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"github.com/flybus/flybus/store"
)

// A router stages a file, a producer fills it, the router seals it and a
// consumer reads it back through the location it was given.
func ExampleStore_Seal() {
	root, _ := os.MkdirTemp("", "store-example-")
	defer os.RemoveAll(root)

	// Files mode: a file per artifact, removed after its last owner.
	s, err := store.Open(store.Config{Root: root, Mode: store.ModeFiles})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	// Router: allocate.
	frame := []byte("a tiny frame")
	st, err := s.Stage(int64(len(frame)))
	if err != nil {
		fmt.Println(err)
		return
	}

	// Producer: resolve the location, write, close.
	w, err := store.OpenWrite(root, s.ID(), st.RelPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	w.WriteAt(frame, 0)
	w.Close()

	// Router: seal. With the producer's descriptor closed, no byte moves.
	digest := sha256.Sum256(frame)
	sealed, err := s.Seal(st.RelPath, st.Size, &digest)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sealed by", sealed.Path)

	// Consumer: read.
	r, err := store.OpenRead(root, s.ID(), sealed.RelPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := io.ReadAll(r)
	r.Close()
	fmt.Printf("%s\n", b)

	// Router: collect once the last owner let go.
	fmt.Println(s.Remove(sealed.RelPath))
	// Output:
	// sealed by lease
	// a tiny frame
	// <nil>
}

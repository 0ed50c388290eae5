package mmap_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/flybus/flybus/mmap"
)

func ExampleMapFile() {
	dir, _ := os.MkdirTemp("", "mmap-example-")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "artifact")
	_ = os.WriteFile(p, []byte("hello, frame"), 0o444)

	f, err := os.Open(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err := mmap.MapFile(f, 12)
	f.Close() // the view keeps the file mapped
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	fmt.Printf("%d bytes: %s\n", v.Len(), v.Bytes())
	// Output: 12 bytes: hello, frame
}

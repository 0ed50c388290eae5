// Command wiregen rewrites package wire's generated codecs. Run it through
// go generate in wire/ (see wire/doc.go), or with the directory of package
// wire as its argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/flybus/flybus/internal/wiregen"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	src, err := wiregen.Generate(dir)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, wiregen.Output), src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

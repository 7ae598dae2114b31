// Validates OpenSLO documents with the OpenSLO Go SDK, as `oslo validate`
// does: every object on its own, then all of them together (references
// between objects). Usage: openslo FILE...
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/OpenSLO/go-sdk/pkg/openslo"
	"github.com/OpenSLO/go-sdk/pkg/openslosdk"
)

func main() {
	var objects []openslo.Object
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		objs, err := openslosdk.Decode(bytes.NewReader(data), openslosdk.FormatYAML)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
		objects = append(objects, objs...)
	}
	if len(objects) == 0 {
		fmt.Fprintln(os.Stderr, "no OpenSLO objects")
		os.Exit(1)
	}
	failed := false
	for _, o := range objects {
		if err := o.Validate(); err != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", o.GetKind(), o.GetName(), err)
			failed = true
		}
	}
	if err := openslosdk.Validate(objects...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
	fmt.Printf("valid: %d objects\n", len(objects))
}

// Command etcd is upstream etcd's server, built from its Go module so the tests need
// no download but the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

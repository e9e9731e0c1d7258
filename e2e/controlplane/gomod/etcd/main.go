// Command etcd is the upstream etcd server, built through a wrapper module
// because go.etcd.io/etcd/server/v3 carries replace directives that forbid
// `go install module@version`.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

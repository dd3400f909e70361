package server

import "os"

// tempCertDir is where self-signed certificates go when neither a
// certificate nor a directory is given: writable even under a read-only
// root filesystem with an emptyDir on /tmp.
func tempCertDir() (string, error) {
	return os.MkdirTemp("", "peerdiscovery-apiserver-certs-")
}

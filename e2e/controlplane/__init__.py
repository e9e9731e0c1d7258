"""Local Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built from source by build-binaries.sh (`make k8s-bins`).

Importing this package is cheap and needs no binaries; the heavy parts load on use.
"""

package filter

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// startRegistration publishes this server's registration Lease (format in
// pkg/peerlease), renews it every peerlease.DefaultRenewInterval and deletes
// it when the server shuts down gracefully, so peers stop routing here at
// once instead of after the lease lapses.
func startRegistration(ctx context.Context, loopback *rest.Config, serverID, endpoint, version string) error {
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return err
	}
	leases := client.CoordinationV1().Leases(peerlease.Namespace)
	renew := func() {
		rctx, cancel := context.WithTimeout(ctx, peerlease.DefaultRenewInterval)
		defer cancel()
		name := peerlease.LeaseName(serverID)
		existing, err := leases.Get(rctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = leases.Create(rctx, peerlease.NewRegistrationLease(nil, serverID, endpoint, version, time.Now()), metav1.CreateOptions{})
		case err == nil:
			_, err = leases.Update(rctx, peerlease.NewRegistrationLease(existing, serverID, endpoint, version, time.Now()), metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			klog.V(2).InfoS("peerdiscovery filter: renewing the registration lease failed", "lease", name, "err", err)
		}
	}
	go func() {
		t := time.NewTicker(peerlease.DefaultRenewInterval)
		defer t.Stop()
		for {
			renew()
			select {
			case <-ctx.Done():
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if err := leases.Delete(dctx, peerlease.LeaseName(serverID), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					klog.InfoS("peerdiscovery filter: deleting the registration lease on shutdown failed; it lapses by itself", "err", err)
				}
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

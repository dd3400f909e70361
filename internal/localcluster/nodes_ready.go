// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package localcluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// waitNodesReady waits until every Node is Ready and every static pod's
// mirror pod is Running in kube-system.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	cs, err := c.adminClientset()
	if err != nil {
		return err
	}
	return c.waitFor(ctx, nil, "every Node Ready and its mirror pods Running", func(ctx context.Context) (bool, string) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := map[string]bool{}
		for _, nd := range nodes.Items {
			for _, cond := range nd.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready[nd.Name] = true
				}
			}
		}
		for _, n := range c.nodes.nodes {
			if !ready[n.name] {
				return false, "Node " + n.name + " not Ready"
			}
		}
		return c.mirrorPodsRunning(ctx, cs)
	})
}

// mirrorPodsRunning checks that every static pod has a Running mirror pod.
func (c *Cluster) mirrorPodsRunning(ctx context.Context, cs kubernetes.Interface) (bool, string) {
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	running := map[string]bool{}
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror && p.Status.Phase == corev1.PodRunning {
			running[p.Name] = true
		}
	}
	for _, want := range c.staticPodNames() {
		if !running[want] {
			return false, "mirror pod " + want + " not Running"
		}
	}
	return true, ""
}

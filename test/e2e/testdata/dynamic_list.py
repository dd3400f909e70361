"""Lists a resource through one kube-apiserver with the Kubernetes Python
client's dynamic client, which finds the resource by legacy discovery
(/apis, then /apis/<group>/<version>): a real client not written in Go.

usage: dynamic_list.py KUBECONFIG CONTEXT API_VERSION KIND CACHE_FILE
Prints one line per object: its name.
"""
import sys

from kubernetes import config, dynamic


def main():
    kubeconfig, context, api_version, kind, cache_file = sys.argv[1:6]
    api = config.new_client_from_config(config_file=kubeconfig, context=context)
    # A fresh discovery cache: the client's default file is shared by runs.
    client = dynamic.DynamicClient(api, cache_file=cache_file)
    resource = client.resources.get(api_version=api_version, kind=kind)
    for item in resource.get().items:
        print(item.metadata.name)


if __name__ == "__main__":
    main()

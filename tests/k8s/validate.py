#!/usr/bin/env python3
"""Validate rendered Kubernetes manifests offline.

    validate.py RENDERED.yaml CRD_DIR

Built-in kinds are checked by kubernetes-validate against the Kubernetes
schemas, strictly (unknown fields are errors). Custom resources (the
Prometheus Operator's ServiceMonitor and PrometheusRule) are checked against
the openAPIV3Schema of their CRD from CRD_DIR, made strict the same way: an
object with `properties` accepts no other key unless the CRD preserves
unknown fields there. Prints one line per object; exits 1 on any error.
"""

import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml


def strict(schema):
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


def crd_schemas(crd_dir):
    out = {}
    for path in sorted(pathlib.Path(crd_dir).glob("*.yaml")):
        try:
            crds = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue  # a CRD no chart here uses, in YAML the safe loader refuses
        for crd in crds:
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group = crd["spec"]["group"]
            kind = crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                out[(f"{group}/{v['name']}", kind)] = strict(v["schema"]["openAPIV3Schema"])
    return out


def main(rendered, crd_dir):
    crds = crd_schemas(crd_dir)
    if not crds:
        print(f"no CRDs found in {crd_dir}", file=sys.stderr)
        return 1
    failed = 0
    docs = [d for d in yaml.safe_load_all(pathlib.Path(rendered).read_text()) if d]
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        name = f"{key[1]}/{doc.get('metadata', {}).get('name')}"
        try:
            if key in crds:
                # The CRD's patterns are Go regexps, which Python's metaschema
                # check refuses: validate the document only.
                jsonschema.Draft7Validator(crds[key]).validate(doc)
            else:
                kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
            print(f"valid: {name}")
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
            failed += 1
            print(f"INVALID: {name}: {e.message if hasattr(e, 'message') else e}")
        except Exception as e:  # unknown kind, missing schema
            failed += 1
            print(f"INVALID: {name}: {e}")
    print(f"{len(docs) - failed} of {len(docs)} objects valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

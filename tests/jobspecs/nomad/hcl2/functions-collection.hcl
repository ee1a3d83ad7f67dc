# HCL2 collection functions: concat, merge, lookup, length, keys, values, contains, element,
# flatten, distinct, range, zipmap, coalesce, coalescelist, compact, slice, reverse, sort, index,
# chunklist, setunion, setintersection, setproduct, strlen.
locals {
  a       = ["x", "y"]
  b       = ["y", "z", ""]
  all     = distinct(concat(local.a, compact(local.b)))
  m       = merge({ a = "1" }, { b = "2" })
  zipped  = zipmap(["k1", "k2"], ["v1", "v2"])
  nested  = flatten([["a"], ["b", ["c"]]])
  chunks  = chunklist(range(6), 2)
  product = setproduct(["web", "api"], ["blue", "green"])
}

job "fn-collection" {
  meta {
    all        = join(",", local.all)
    count      = length(local.all)
    first      = element(local.all, 0)
    last       = element(reverse(local.all), 0)
    sorted     = join(",", sort(["c", "a", "b"]))
    sliced     = join(",", slice(local.all, 0, 2))
    keys       = join(",", keys(local.m))
    values     = join(",", values(local.zipped))
    lookup     = lookup(local.m, "c", "default")
    has_x      = format("%t", contains(local.all, "x"))
    idx        = format("%d", index(local.all, "y"))
    nested     = join("", local.nested)
    chunks     = format("%d", length(local.chunks))
    products   = format("%d", length(local.product))
    union      = join(",", sort(setunion(local.a, ["w"])))
    inter      = join(",", setintersection(local.a, local.b))
    first_len  = format("%d", strlen(local.all[0]))
    first_set  = coalesce("", "fallback")
    first_list = join(",", coalescelist([], ["p", "q"]))
  }

  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/bin/true"
      }
    }
  }
}

/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* Whether a struct net is the recorded namespace: a template the hook
 * templates include, with RD() and H() as theirs. Needs filter_netns (const
 * volatile, 0: any namespace), and net_seen_at() and net_other_at(), the
 * object's places for the addresses below (lines its hooks touch anyway, if
 * it has them; NULL where it has none).
 *
 * The namespace's inode is a load from its struct net on every event, and
 * under load that struct is out of the cache. So the address of the struct
 * net that matched is kept and compared first: a struct net is never freed
 * while its namespace is held, and the recorder holds the recorded one open
 * for as long as its programs run, so no other namespace can take its
 * address. For the same reason an address that did not match never will:
 * the last one is kept too (where every interface has the
 * same index in its own namespace, as veth peers in containers often do,
 * the other end's events stop at it). Not a standalone header. */

static __always_inline bool H(net_is_ours)(const struct net *net)
{
	if (!filter_netns)
		return true;
	if (!net)
		return false;
	__u64 *seen = net_seen_at();
	if (seen && (__u64)net == seen[0])
		return true;
	__u64 *other = net_other_at();
	if (other && (__u64)net == *other)
		return false;
	if (RD(net, ns.inum) != filter_netns) {
		if (other)
			*other = (__u64)net;
		return false;
	}
	if (seen)
		seen[0] = (__u64)net;
	return true;
}

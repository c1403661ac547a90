// Package volumesync gives a virtual cluster's PersistentVolumeClaims host
// copies and tells the virtual cluster the truth about them.
//
// One queue of virtual claim keys (namespace/name) is fed by the virtual
// claims, the virtual PersistentVolumes the agent made (by their claimRef)
// and the host claims (their annotations name the virtual claim). Each key is
// reconciled level-based:
//
//   - a virtual claim that may be synced (translate.ClaimProblems finds
//     nothing) gets a host claim with only its size, access modes, volume
//     mode and storage class; a refused one gets a Warning Event saying why
//     and nothing on the host;
//   - once the host claim exists, a virtual PersistentVolume pre-bound to the
//     virtual claim stands for it (translate.VirtualVolume), so the virtual
//     PersistentVolume controller binds the claim and the virtual scheduler
//     places its pods. It is made before the host binds: with a
//     WaitForFirstConsumer class the host binds only when a host pod uses the
//     claim, and no host pod exists before the virtual scheduler has placed
//     the virtual one. The volume's annotations carry the host claim, the host
//     volume and the host phase; its capacity and access modes, and the
//     virtual claim's status, follow the host claim once bound;
//   - a larger storage request is passed on to the host claim (the host
//     refuses it where its class does not allow expansion; the refusal is an
//     Event on the virtual claim);
//   - a virtual claim that is gone (confirmed by a live read, never on a
//     cache's word alone) takes its host claim and virtual volume with it; a
//     new claim under the same name replaces the host claim.
//
// Host claims carry the agent's labels, the Cluster as owner and the hash of
// what the agent decided, nothing the tenant wrote in metadata: the
// annotations host provisioners read (volume.beta.kubernetes.io/storage-class,
// volume.kubernetes.io/selected-node) never reach the host.
//
// Like the other loops, Run holds one set of virtual credentials, acts only
// after every cache has synced and is restarted when credentials change. It is
// tested through pkg/agent's suite, against two real kube-apiservers.
package volumesync

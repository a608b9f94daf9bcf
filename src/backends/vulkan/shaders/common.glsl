// Shared by every shader: the push constants and the index helpers. Every tensor is bound as a
// whole window of its buffer; off[i] is the tensor's offset in 32-bit words inside binding i's
// window, n_groups the workgroups the op needs (the host may launch a few more when it folds a long
// grid into two dimensions: those return at once), p[] the op's parameters (floats as bits).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
  uint off[8];
  uint n_groups;
  uint p[23];
} pc;

float pf(uint i) { return uintBitsToFloat(pc.p[i]); }

// The flat index of this workgroup in a grid the host may fold into two dimensions.
uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
bool extra_group() { return group_index() >= pc.n_groups; }
uint global_index() { return group_index() * 64u + gl_LocalInvocationID.x; }

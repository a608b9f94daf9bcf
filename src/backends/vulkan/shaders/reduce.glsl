// Workgroup sums and maxima through shared memory: any subgroup size, 64 invocations.
shared float red[64];

float group_sum(float v) {
  const uint t = gl_LocalInvocationID.x;
  barrier();
  red[t] = v;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    barrier();
  }
  return red[0];
}

float group_max(float v) {
  const uint t = gl_LocalInvocationID.x;
  barrier();
  red[t] = v;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) red[t] = max(red[t], red[t + s]);
    barrier();
  }
  return red[0];
}
